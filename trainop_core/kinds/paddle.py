"""PaddleJob: Master (parameter-server mode) and Worker; `paddle.distributed.launch`'s PADDLE_* env.

Without a Master the job runs collective (worker 0 is the rendezvous); with one, in PS mode.
This module plus one line in `trainop_core.kinds.table` is all the kind takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ApiModel, NonNegInt, ReplicaSpec, RestartPolicy
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import (
    default_elastic_bounds,
    env_var,
    replica_spec,
    total_replicas,
    worker_style_status,
)


class PaddleElasticPolicy(ApiModel):
    min_replicas: NonNegInt | None = None
    max_replicas: NonNegInt | None = None
    max_restarts: NonNegInt | None = None
    metrics: list[dict[str, object]] | None = None


class PaddleJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="paddleReplicaSpecs")
    elastic_policy: PaddleElasticPolicy | None = None


class PaddleJob(TrainingJob):
    kind: str = "PaddleJob"
    spec: PaddleJobSpec


MASTER, WORKER = "Master", "Worker"
# The rank-0 rendezvous listens on its own pod IP, which only the downward API knows.
POD_IP_DUMMY = {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def _spec(job: TrainingJob) -> PaddleJobSpec:
    if not isinstance(job.spec, PaddleJobSpec):
        raise TypeError(f"expected a PaddleJob, got {job.kind}")
    return job.spec


def paddle_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    ps_mode = bool(ctx.replicas.get(MASTER))
    leader = MASTER if ps_mode else WORKER  # who hosts the rendezvous
    port = ctx.addressing.port(leader, 0)
    env = [
        env_var("PYTHONUNBUFFERED", "1"),
        env_var("PADDLE_JOB_ID", ctx.job.name),
        env_var("PADDLE_NNODES", total_replicas(ctx.replicas)),
    ]
    if rtype == leader and index == 0:
        env += [dict(POD_IP_DUMMY), env_var("PADDLE_MASTER", f"$(POD_IP_DUMMY):{port}")]
    else:
        env.append(env_var("PADDLE_MASTER", f"{ctx.addressing.host(leader, 0)}:{port}"))
    if ps_mode:  # each pod holds exactly one server or one trainer
        env.append(env_var("PADDLE_SERVER_NUM" if rtype == MASTER else "PADDLE_TRAINER_NUM", 1))
    return env


def paddle_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return rtype == MASTER


def paddle_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    # PyTorch's rule without its elastic early success (upstream's Paddle controller has none).
    if MASTER in counts:
        return worker_style_status(job, counts, leader=MASTER, name=job.name)
    return worker_style_status(
        job, counts, leader=WORKER, name=job.key, completed="successfully completed."
    )


def paddle_default(job: TrainingJob) -> None:
    policy = _spec(job).elastic_policy
    if policy is not None:
        worker = replica_spec(job, WORKER)
        default_elastic_bounds(policy, worker.replicas if worker is not None else None)


KIND = Kind(
    kind="PaddleJob",
    plural="paddlejobs",
    job_model=PaddleJob,
    replica_field="paddleReplicaSpecs",
    replica_types=(MASTER, WORKER),
    default_container="paddle",
    port_name="master",
    default_port=36543,
    default_restart_policy=RestartPolicy.ON_FAILURE,
    framework="paddle",
    env=paddle_env,
    is_master_role=paddle_is_master,
    primary_types=(WORKER,),  # PS mode: the Master is the parameter server, Workers train
    status=paddle_status,
    default=paddle_default,
    scale_replica_type=WORKER,
)
