"""The common kubeflow.org/v1 API types shared by every job kind.

Field names are Pythonic in code and camelCase on the wire, exactly as upstream's
`common_types.go`. Unknown fields are rejected (strict field validation, like kubectl's).
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def format_time(value: datetime) -> str:
    """RFC 3339 with second precision and a Z, as the Kubernetes API writes times."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, PlainSerializer(format_time, return_type=str)]


class ApiModel(BaseModel):
    """Base of every API model: camelCase aliases, unknown fields rejected, assignment checked."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        use_enum_values=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class WireEnum(str, Enum):
    """Members print as their wire value: "Succeeded", not "ConditionType.SUCCEEDED"."""

    def __str__(self) -> str:
        return str(self.value)


class RestartPolicy(WireEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(WireEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class ConditionType(WireEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    SUSPENDED = "Suspended"
    FAILED = "Failed"


class ConditionStatus(WireEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


MANAGED_BY_OPERATOR = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES = (MANAGED_BY_OPERATOR, MANAGED_BY_MULTIKUEUE)

NonNegInt = Annotated[int, Field(ge=0)]


class SchedulingPolicy(ApiModel):
    """Gang-scheduling knobs, copied into the job's PodGroup."""

    min_available: NonNegInt | None = None
    queue: str | None = None
    min_resources: dict[str, str | int | float] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: NonNegInt | None = None


class RunPolicy(ApiModel):
    """Run-time policy shared by every kind: clean-up, TTL, deadline, backoff, gang, suspend."""

    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: NonNegInt | None = None
    active_deadline_seconds: NonNegInt | None = None
    backoff_limit: NonNegInt | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class ReplicaSpec(ApiModel):
    """One replica type: how many, which pod, and how to restart it.

    `template` is a Kubernetes PodTemplateSpec kept as plain data (every pod field is preserved);
    its shape is checked against the Kubernetes schema by `trainop_core.api.podtemplate`.
    """

    replicas: NonNegInt | None = None
    template: dict[str, Any] = Field(default_factory=dict)
    restart_policy: RestartPolicy | None = None


class JobCondition(ApiModel):
    type: ConditionType
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_update_time: Time | None = None
    last_transition_time: Time | None = None


class LabelSelector(ApiModel):
    match_labels: dict[str, str] | None = None
    match_expressions: list[dict[str, Any]] | None = None


class ReplicaStatus(ApiModel):
    active: NonNegInt | None = None
    succeeded: NonNegInt | None = None
    failed: NonNegInt | None = None
    label_selector: LabelSelector | None = None
    selector: str | None = None


class JobStatus(ApiModel):
    conditions: list[JobCondition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    start_time: Time | None = None
    completion_time: Time | None = None
    last_reconcile_time: Time | None = None


class OwnerReference(ApiModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(ApiModel):
    """Kubernetes ObjectMeta (every field the API server may return)."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    deletion_grace_period_seconds: int | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[dict[str, Any]] | None = None
    self_link: str | None = None


# What the API server owns of an object's metadata; a new object never keeps them from its client.
SERVER_SET = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
              "deletionGracePeriodSeconds", "managedFields", "selfLink")  # fmt: skip


class NamedByMetadata:
    """`name` and `namespace` of a Kubernetes object model read from its `metadata` (a mixin of
    properties only: no field, so the model's fields and their dumped order are its own)."""

    if TYPE_CHECKING:
        metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"
