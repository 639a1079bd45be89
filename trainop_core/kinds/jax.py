"""JAXJob, the fifth kind: Workers only; worker 0 coordinates `jax.distributed.initialize`.

This module plus one line in `trainop_core.kinds.table` is all a kind takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import env_var, total_replicas, worker_style_status


class JAXJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="jaxReplicaSpecs")


class JAXJob(TrainingJob):
    kind: str = "JAXJob"
    spec: JAXJobSpec


WORKER = "Worker"


def jax_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    return [
        env_var("PYTHONUNBUFFERED", "1"),
        env_var("COORDINATOR_ADDRESS", ctx.addressing.host(WORKER, 0)),
        env_var("COORDINATOR_PORT", ctx.addressing.port(WORKER, 0)),
        env_var("NUM_PROCESSES", total_replicas(ctx.replicas)),
        env_var("PROCESS_ID", index),
    ]


def jax_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return index == 0


def jax_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    return worker_style_status(
        job, counts, leader=WORKER, name=job.key, completed="successfully completed."
    )


KIND = Kind(
    kind="JAXJob",
    plural="jaxjobs",
    job_model=JAXJob,
    replica_field="jaxReplicaSpecs",
    replica_types=(WORKER,),
    default_container="jax",
    port_name="jaxjob-port",
    default_port=6666,
    default_restart_policy=RestartPolicy.NEVER,
    framework="jax",
    env=jax_env,
    is_master_role=jax_is_master,
    primary_types=(WORKER,),
    status=jax_status,
    scale_replica_type=WORKER,
)
