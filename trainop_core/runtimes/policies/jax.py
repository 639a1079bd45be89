"""jax: Trainer's contract for `jax.distributed.initialize`. jax (checked: 0.10.2) reads only
JAX_COORDINATOR_ADDRESS itself; a script passes JAX_NUM_PROCESSES and JAX_PROCESS_ID."""

from __future__ import annotations

from typing import Any

from trainop_core.kinds.base import ClusterContext
from trainop_core.kinds.common import env_var
from trainop_core.runtimes.policies.base import MLPolicy, master, nodes


def jax_env(ctx: ClusterContext, index: int, nproc: int | str) -> list[dict[str, Any]]:
    host, port = master(ctx)
    return [
        env_var("JAX_COORDINATOR_ADDRESS", f"{host}:{port}"),
        env_var("JAX_NUM_PROCESSES", nodes(ctx)),
        env_var("JAX_PROCESS_ID", index),
    ]


# the variables above (Trainer v2.3 sets them too but checks none).
RESERVED = frozenset({"JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"})
POLICY = MLPolicy(name="jax", port=6666, env=jax_env, reserved_env=RESERVED)
