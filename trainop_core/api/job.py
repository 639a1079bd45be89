"""The shape every kubeflow.org/v1 job shares; each kind module subclasses these two models.

A kind's spec re-declares `replica_specs` with its own wire name (`tfReplicaSpecs`,
`pytorchReplicaSpecs`, ...) and adds its own options; the job model only narrows `spec`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trainop_core.api.types import (
    ApiModel,
    JobStatus,
    NamedByMetadata,
    ObjectMeta,
    ReplicaSpec,
    RunPolicy,
)

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"


class JobSpec(ApiModel):
    """Replica specs keyed by replica type, plus the run policy."""

    replica_specs: dict[str, ReplicaSpec]
    run_policy: RunPolicy = Field(default_factory=RunPolicy)


class TrainingJob(NamedByMetadata, ApiModel):
    """A job of any kind. `kind` names its kind module; `spec` is that kind's spec model."""

    api_version: str = API_VERSION
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec
    status: JobStatus | None = None

    @property
    def key(self) -> str:
        """Job identity, as on Kubernetes: namespace/name."""
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def as_stored(self) -> dict[str, Any] | None:
        """The object its user wrote, as its API stores it, where that is not this model (a
        TrainJob's: `runtimes.kind.PlannedTrainJob`); None for a kubeflow.org/v1 job."""
        return None
