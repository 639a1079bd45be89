"""XGBoostJob: Master + Worker; MASTER_ADDR/PORT, WORKER_ADDRS/PORT, RANK, WORLD_SIZE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import (
    RUNNING,
    SUCCEEDED,
    env_var,
    exactly_one,
    failure_verdict,
    strongest,
    total_replicas,
)


class XGBoostJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="xgbReplicaSpecs")


class XGBoostJob(TrainingJob):
    kind: str = "XGBoostJob"
    spec: XGBoostJobSpec


MASTER, WORKER = "Master", "Worker"


def xgboost_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    total = total_replicas(ctx.replicas)
    masters = ctx.replicas.get(MASTER, 0)
    env = [
        env_var("MASTER_PORT", ctx.addressing.port(MASTER, 0)),
        env_var("MASTER_ADDR", ctx.addressing.host(MASTER, 0)),
        env_var("WORLD_SIZE", total),
        env_var("RANK", index if rtype == MASTER else index + masters),
        env_var("PYTHONUNBUFFERED", "1"),
    ]
    if total > 1:
        env.append(env_var("WORKER_PORT", ctx.addressing.port(WORKER, 0)))
        env.append(env_var("WORKER_ADDRS", _worker_addrs(ctx, total)))
    return env


def _worker_addrs(ctx: ClusterContext, total: int) -> str:
    # Upstream lists total-1 workers; the same string for every replica, so built once per plan.
    if "xgboost.worker_addrs" not in ctx.memo:
        hosts = (ctx.addressing.host(WORKER, i) for i in range(total - 1))
        ctx.memo["xgboost.worker_addrs"] = ",".join(hosts)
    addrs: str = ctx.memo["xgboost.worker_addrs"]
    return addrs


def xgboost_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return rtype == MASTER


def xgboost_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    verdicts = []
    master = counts.get(MASTER)
    if master is not None and master.replicas - master.succeeded == 0:
        verdicts.append(Verdict(SUCCEEDED, f"XGBoostJob {job.name} is successfully completed."))
    elif master is not None and master.active > 0:
        verdicts.append(Verdict(RUNNING, f"XGBoostJob {job.name} is running.", MASTER))
    for rtype, c in counts.items():
        # Upstream marks the job Running before judging a failure; the judgement is what sticks.
        if c.failed > 0:
            restart = c.restart_policy == RestartPolicy.EXIT_CODE
            verdicts.append(failure_verdict("XGBoostJob", job.name, rtype, c, restart=restart))
    return strongest(verdicts)


def xgboost_validate(job: TrainingJob) -> list[Problem]:
    return exactly_one(job, "xgbReplicaSpecs", MASTER, required=True)


KIND = Kind(
    kind="XGBoostJob",
    plural="xgboostjobs",
    job_model=XGBoostJob,
    replica_field="xgbReplicaSpecs",
    replica_types=(MASTER, WORKER),
    default_container="xgboost",
    port_name="xgboostjob-port",
    default_port=9999,
    default_restart_policy=RestartPolicy.NEVER,
    framework="xgboost",
    env=xgboost_env,
    is_master_role=xgboost_is_master,
    primary_types=(MASTER,),
    status=xgboost_status,
    validate=xgboost_validate,
)
