"""xgboost: node 0 runs the Rabit/collective tracker; every node is told where and its rank."""

from __future__ import annotations

from typing import Any

from trainop_core.kinds.base import ClusterContext
from trainop_core.kinds.common import env_var
from trainop_core.runtimes.policies.base import MLPolicy, master, nodes


def xgboost_env(ctx: ClusterContext, index: int, nproc: int | str) -> list[dict[str, Any]]:
    host, port = master(ctx)
    return [
        env_var("DMLC_TRACKER_URI", host),
        env_var("DMLC_TRACKER_PORT", port),
        env_var("DMLC_TASK_ID", index),
        env_var("DMLC_NUM_WORKER", nodes(ctx)),
    ]


# Trainer's XGBoostReservedEnvNames: the variables above.
RESERVED = frozenset({"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"})
POLICY = MLPolicy(name="xgboost", port=9999, env=xgboost_env, reserved_env=RESERVED)
