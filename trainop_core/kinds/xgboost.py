"""XGBoostJob: Master + Worker; MASTER_ADDR/PORT, WORKER_ADDRS/PORT, RANK, WORLD_SIZE."""

from __future__ import annotations

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec


class XGBoostJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="xgbReplicaSpecs")


class XGBoostJob(TrainingJob):
    kind: str = "XGBoostJob"
    spec: XGBoostJobSpec
