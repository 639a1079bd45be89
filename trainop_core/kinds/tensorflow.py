"""TFJob: Chief/Master, PS, Worker, Evaluator; TF_CONFIG in the `tensorflow` container."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec


class SuccessPolicy(str, Enum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


class TFJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="tfReplicaSpecs")
    success_policy: SuccessPolicy | None = None
    enable_dynamic_worker: bool | None = None


class TFJob(TrainingJob):
    kind: str = "TFJob"
    spec: TFJobSpec
