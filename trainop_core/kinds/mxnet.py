"""MXJob (alias MXNetJob): Scheduler, Server, Worker (+ tuning roles); DMLC_* env and MX_CONFIG."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec


class JobMode(str, Enum):
    TRAIN = "MXTrain"
    TUNE = "MXTune"


class MXJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="mxReplicaSpecs")
    job_mode: JobMode | None = None


class MXJob(TrainingJob):
    kind: str = "MXJob"
    spec: MXJobSpec
