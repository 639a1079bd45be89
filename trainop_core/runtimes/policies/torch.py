"""torch: torchrun's contract (PET_* are torchrun's own option variables)."""

from __future__ import annotations

from typing import Any

from trainop_core.kinds.base import ClusterContext
from trainop_core.kinds.common import env_var
from trainop_core.runtimes.policies.base import MLPolicy, master, nodes


def torch_env(ctx: ClusterContext, index: int, nproc: int | str) -> list[dict[str, Any]]:
    host, port = master(ctx)
    return [
        env_var("PET_NNODES", nodes(ctx)),
        env_var("PET_NPROC_PER_NODE", nproc),
        env_var("PET_NODE_RANK", index),
        env_var("PET_MASTER_ADDR", host),
        env_var("PET_MASTER_PORT", port),
    ]


# Trainer's TorchRunReservedEnvNames: the variables above.
RESERVED = frozenset(
    {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
)
POLICY = MLPolicy(name="torch", port=29500, env=torch_env, reserved_env=RESERVED)
