"""PyTorchJob: Master + Worker, torchrun's PET_* env, elastic policy."""

from __future__ import annotations

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ApiModel, NonNegInt, ReplicaSpec


class RDZVConf(ApiModel):
    key: str
    value: str


class ElasticPolicy(ApiModel):
    min_replicas: NonNegInt | None = None
    max_replicas: NonNegInt | None = None
    rdzv_backend: str | None = None
    rdzv_port: NonNegInt | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RDZVConf] | None = None
    standalone: bool | None = None
    n_proc_per_node: NonNegInt | None = Field(default=None, alias="nProcPerNode")
    max_restarts: NonNegInt | None = None
    metrics: list[dict[str, object]] | None = None


class PyTorchJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="pytorchReplicaSpecs")
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = None


class PyTorchJob(TrainingJob):
    kind: str = "PyTorchJob"
    spec: PyTorchJobSpec
