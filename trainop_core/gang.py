"""Gang scheduling: the PodGroup a job needs and how its pods point at it.

Two flavours, chosen by the operator's `--gang-scheduler-name`: "volcano" (any case) gives a
Volcano PodGroup (scheduling.volcano.sh/v1beta1); any other non-empty name gives a
scheduler-plugins coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1) and becomes the pods'
schedulerName. Pure functions of the defaulted job; the planner calls them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import SchedulingPolicy
from trainop_core.kinds.base import Kind
from trainop_core.planner.types import Event

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
PLUGINS_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# Volcano admits a PodGroup by moving it out of Pending; pods created before that can deadlock.
VOLCANO_WAITING_PHASES = (None, "", "Pending")


def is_volcano(scheduler: str) -> bool:
    return scheduler.lower() == "volcano"


def pod_scheduler_name(scheduler: str) -> str:
    return "volcano" if is_volcano(scheduler) else scheduler


def delays_pod_creation(scheduler: str, pod_group_phase: str | None) -> bool:
    """Volcano only: no pods until the PodGroup has been admitted (phase set, not Pending)."""
    return is_volcano(scheduler) and pod_group_phase in VOLCANO_WAITING_PHASES


def _policy(job: TrainingJob) -> SchedulingPolicy:
    return job.spec.run_policy.scheduling_policy or SchedulingPolicy()


def min_member(job: TrainingJob) -> int:
    policy = _policy(job)
    if policy.min_available is not None:
        return policy.min_available
    return sum(spec.replicas or 0 for spec in job.spec.replica_specs.values())


def pod_group(
    job: TrainingJob, kind: Kind, scheduler: str, owner: dict[str, Any]
) -> dict[str, Any]:
    """The PodGroup manifest (named like the job) for `scheduler`."""
    policy = _policy(job)
    members = min_member(job)
    resources = policy.min_resources or min_resources(job, kind, members)
    spec: dict[str, Any] = {"minMember": members}
    if is_volcano(scheduler):
        spec["queue"] = policy.queue or "default"
        if policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
    elif policy.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    if resources:
        spec["minResources"] = {k: str(v) for k, v in resources.items()}
    metadata: dict[str, Any] = {
        "name": job.name,
        "namespace": job.namespace,
        "ownerReferences": [owner],
    }
    if job.metadata.annotations:
        metadata["annotations"] = dict(job.metadata.annotations)
    api = VOLCANO_API if is_volcano(scheduler) else PLUGINS_API
    return {"apiVersion": api, "kind": "PodGroup", "metadata": metadata, "spec": spec}


def decorate_pod(job: TrainingJob, rtype: str, pod: dict[str, Any], scheduler: str) -> list[Event]:
    """Point `pod` at the job's PodGroup; a Warning if the template chose another scheduler."""
    events = []
    spec = pod.setdefault("spec", {})
    wanted = pod_scheduler_name(scheduler)
    chosen = spec.get("schedulerName")
    if chosen and chosen != wanted:
        message = f"Another scheduler ({chosen}) is specified in the pod template; it is kept."
        events.append(Event("Warning", "SetPodTemplateSchedulerName", message))
    else:
        spec["schedulerName"] = wanted
    metadata = pod.setdefault("metadata", {})
    if is_volcano(scheduler):
        annotations = metadata.setdefault("annotations", {})
        annotations[VOLCANO_GROUP_ANNOTATION] = job.name
        annotations[VOLCANO_TASK_ANNOTATION] = rtype.lower()
    else:
        metadata.setdefault("labels", {})[PLUGINS_GROUP_LABEL] = job.name
    return events


# --- minResources ---------------------------------------------------------------------------


def _pod_templates(job: TrainingJob, kind: Kind) -> Iterator[Mapping[str, Any]]:
    """One template per replica, replica types in the kind's order.

    Upstream orders by the templates' PriorityClass *values*, which only the cluster knows; a pure
    planner cannot look them up, so the kind's replica-type order stands in for them.
    """
    specs = job.spec.replica_specs
    ordered = [r for r in kind.replica_types if r in specs] + [
        r for r in specs if r not in kind.replica_types
    ]
    for rtype in ordered:
        for _ in range(specs[rtype].replicas or 0):
            yield specs[rtype].template


def _container_resources(template: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        yield resources.get("requests") or resources.get("limits") or {}


def min_resources(job: TrainingJob, kind: Kind, members: int) -> dict[str, str]:
    """Sum of the requests (else limits) of the first `members` pods."""
    totals: dict[str, Decimal] = {}
    for count, template in enumerate(_pod_templates(job, kind)):
        if count >= members:
            break
        for resources in _container_resources(template):
            for name, value in resources.items():
                totals[name] = totals.get(name, Decimal(0)) + parse_quantity(value)
    return {name: format_quantity(total) for name, total in totals.items()}


_SUFFIXES = {
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4),
    "Pi": Decimal(1024**5),
    "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", 1.5, "1e3") as a number of base units."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return Decimal(text)


def format_quantity(value: Decimal) -> str:
    """A canonical-enough quantity: whole binary/decimal multiples, plain integers, or milli."""
    if value != value.to_integral_value():
        return f"{(value * 1000).to_integral_value()}m"
    number = int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki", "E", "P", "T", "G", "M", "k"):
        unit = int(_SUFFIXES[suffix])
        if number >= unit and number % unit == 0:
            return f"{number // unit}{suffix}"
    return str(number)
