"""What an ML policy is: a name, the port node 0 serves its peers on, and the env contract;
a policy whose program starts from a launcher (mpi) also names the launcher pattern's layout.

Adding a framework is one module building an `MLPolicy` plus one line in `policies.table`, as
adding a v1 kind is. A policy holds no planning logic: the planner runs every TrainJob alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext
from trainop_core.kinds.mpi import Layout

NODE = "Node"  # the trainer step as a replica type (pods and replica ids read node-<i>)
LAUNCHER = "Launcher"  # a launcher policy's launcher (MPIJob's replica type of the same name)

# (context, node index, processes per node: a count or "auto") -> env entries; pure.
NodeEnv = Callable[[ClusterContext, int, int | str], list[dict[str, Any]]]


def no_env(ctx: ClusterContext, index: int, nproc: int | str) -> list[dict[str, Any]]:
    return []


@dataclass(frozen=True)
class MLPolicy:
    name: str  # the runtime's mlPolicy source: torch, xgboost, jax, mpi; "plain" when none
    port: int  # where node 0 listens for its peers (rendezvous, tracker, coordinator)
    env: NodeEnv = no_env
    # Set when one launcher pod runs the program and starts its processes in the nodes (mpi):
    # MPIJob's launcher pattern (`kinds.mpi`) with the nodes as its hosts.
    launcher: Layout | None = None
    # Env a TrainJob's `spec.trainer.env` may not name: Trainer's reserved list for the policy,
    # and every variable the policy sets here (it would silently override the job's).
    reserved_env: frozenset[str] = frozenset()

    def env_problems(self, env: list[dict[str, Any]], path: str) -> list[Problem]:
        """A problem for each entry of `env` (at `path`) naming a reserved variable."""
        return [
            Problem(
                f"{path}[{index}].name",
                f"must not have reserved envs: {entry['name']} is set by the {self.name} ML policy",
            )
            for index, entry in enumerate(env)
            if entry.get("name") in self.reserved_env
        ]


def nodes(ctx: ClusterContext) -> int:
    return ctx.replicas.get(NODE, 0)


def master(ctx: ClusterContext) -> tuple[str, int]:
    """Node 0's host and port, as this backend reaches it."""
    return ctx.addressing.host(NODE, 0), ctx.addressing.port(NODE, 0)
