"""The planner's inputs and output. Backends turn what they observe into these and apply a Plan.

The planner is a pure function: `plan(job, kind, observed, now, addressing, options) -> Plan`.
It never does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainop_core.api.types import JobStatus


@dataclass(frozen=True)
class ObservedPod:
    """One replica pod (Kubernetes) or process (local) as last seen.

    `phase` is the Kubernetes pod phase: Pending, Running, Succeeded, Failed or Unknown.
    `exit_code` is that of the kind's default container when it has terminated, else None.
    `restart_count` sums the in-place restarts of all its containers (OnFailure/Always).
    """

    name: str
    replica_type: str  # canonical, e.g. "Worker"
    index: int
    phase: str
    exit_code: int | None = None
    restart_count: int = 0
    deleting: bool = False  # deletionTimestamp set
    reason: str = ""  # e.g. the terminated container's reason, "Evicted"
    message: str = ""
    uid: str = ""


@dataclass(frozen=True)
class ObservedService:
    name: str
    replica_type: str
    index: int


@dataclass(frozen=True)
class Observed:
    """Everything owned by the job that the backend can see this round."""

    pods: tuple[ObservedPod, ...] = ()
    services: tuple[ObservedService, ...] = ()
    pod_group_phase: str | None = None  # Volcano PodGroup status.phase, when gang scheduling


@dataclass(frozen=True)
class Event:
    """A Kubernetes event to record on the job (type Normal or Warning, upstream reasons)."""

    type: str
    reason: str
    message: str


@dataclass
class Plan:
    """What must happen now for one job. Backends apply it in this order:
    deletions, objects, creations, status write, events; then look again after `requeue_after`
    seconds.
    """

    create_pods: list[dict[str, Any]] = field(default_factory=list)  # full Pod manifests
    create_services: list[dict[str, Any]] = field(default_factory=list)
    # The kind's other objects (Kind.objects) as they must be: created if missing, replaced if
    # their content differs; applied before any pod. Planned every round while the job runs.
    apply_objects: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)  # pod names
    delete_services: list[str] = field(default_factory=list)
    pod_group: dict[str, Any] | None = None  # PodGroup to create or update
    delete_pod_group: bool = False
    status: JobStatus | None = None  # next status; None = unchanged
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None  # seconds until the planner must look again
    delete_job: bool = False  # TTL after finish has expired
    restarts: int = 0  # replicas restarted this round (metrics)
    metrics: list[str] = field(default_factory=list)  # see METRICS
    # Annotations to merge onto the job's metadata (a patch), applied before the status write.
    # Used for the durable restart count (RESTARTS_ANNOTATION) that backoffLimit needs.
    job_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        """Nothing to apply and no need to look again."""
        return self == Plan()


# Plan.metrics entries and the upstream counters they stand for (labels job_namespace, framework).
METRICS = {
    "created": "training_operator_jobs_created_total",
    "deleted": "training_operator_jobs_deleted_total",
    "successful": "training_operator_jobs_successful_total",
    "failed": "training_operator_jobs_failed_total",
    "restarted": "training_operator_jobs_restarted_total",
}

# Operator-driven re-creations of failed pods so far; backoffLimit counts them (upstream #2045).
RESTARTS_ANNOTATION = "trainop.kubeflow.org/restarts"


@dataclass(frozen=True)
class PlanOptions:
    """Backend-wide settings that change what is planned."""

    gang_scheduler_name: str = ""  # "" off, "volcano", or a scheduler-plugins name
    # CUSTOM_CLUSTER_DOMAIN for TF_CONFIG hosts. Informational: the planner asks the Addressing
    # for hosts, so pass it to KubernetesAddressing(job, kind, cluster_domain) too.
    cluster_domain: str = ""
    # Settings for kind hooks, keyed "<framework>.<option>", e.g.
    # {"pytorch.init_container_image": "alpine:3.10", "pytorch.init_container_max_tries": 100}.
    kind_options: Mapping[str, object] = field(default_factory=dict)
