"""The local queue's rules, pure: what a job requests, its priority, and who is admitted next.

A job carrying Kueue's label `kueue.x-k8s.io/queue-name` (the same YAML queues on Kubernetes)
waits on this machine until its queue has room for its requests. The effector that applies these
rules to the state directory is `queue`; nothing here does I/O.

- **Requests**: the sum over every replica of its pod's CPU and memory requests (a container's
  limits stand in for requests it does not give, as Kubernetes defaults them; a pod requests the
  larger of its containers' sum and its largest init container). A container that requests no
  CPU counts as `DEFAULT_CPU` (1 CPU: a local replica is a process that can keep one core busy,
  like a LimitRange `defaultRequest`); one that requests no memory counts as 0.
- **Priority**: `runPolicy.schedulingPolicy.priorityClass` (or Kueue's label
  `kueue.x-k8s.io/priority-class`, which wins) names a class whose value is set locally
  (`trainop queue priority NAME VALUE`, plus Kubernetes' two built-in system classes), as Kueue
  takes the PriorityClass's value. No class: 0. An unknown class is refused at
  creation, naming the field, as Kubernetes refuses a pod whose priorityClassName is unknown.
- **Order**: higher priority first, FIFO (by submission) within a priority. Like Kueue's default
  BestEffortFIFO, a job that does not fit now does not hold back smaller ones behind it; a job
  larger than the whole quota can never be admitted and says so.
- No preemption: an admitted job keeps its quota until it finishes or is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from trainop_core.errors import InvalidJobError, Problem
from trainop_core.gang import format_quantity, parse_quantity

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_FIELD = f"metadata.labels[{QUEUE_LABEL}]"
PRIORITY_FIELD = "spec.runPolicy.schedulingPolicy.priorityClass"
WORKLOAD_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
WORKLOAD_PRIORITY_FIELD = f"metadata.labels[{WORKLOAD_PRIORITY_LABEL}]"
DEFAULT_CPU = Decimal(1)
# Kubernetes' built-in PriorityClasses, always known.
SYSTEM_PRIORITY_CLASSES = {
    "system-cluster-critical": 2000000000,
    "system-node-critical": 2000001000,
}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label, like a LocalQueue's
RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class Resources:
    """CPU (cores) and memory (bytes)."""

    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory)

    def scaled(self, factor: int) -> Resources:
        return Resources(self.cpu * factor, self.memory * factor)

    def get(self, resource: str) -> Decimal:
        return self.cpu if resource == "cpu" else self.memory

    def to_dict(self) -> dict[str, str]:
        return {name: format_quantity(self.get(name)) for name in RESOURCES}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resources:
        """From `{"cpu": "2", "memory": "4Gi"}`; ValueError naming the resource if one is not a
        non-negative quantity."""
        values = {name: quantity(data.get(name, 0), name) for name in RESOURCES}
        return cls(values["cpu"], values["memory"])


# A quantity, as Kubernetes bounds one: at most 2^63-1 in its base unit (cores, bytes), with at
# most three decimal places.
MAX_QUANTITY = Decimal(2**63 - 1)


def quantity(value: object, what: str) -> Decimal:
    """A non-negative Kubernetes quantity; ValueError saying `what` was wrong."""
    text = str(value).strip()
    try:
        if not text or len(text) > 40 or isinstance(value, bool):
            raise InvalidOperation
        number = parse_quantity(text)
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what}: {text[:40]!r} is not a quantity (e.g. 2, 500m, 4Gi)") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"{what}: {text[:40]!r} is not a non-negative quantity")
    if number > MAX_QUANTITY:  # Kubernetes' bound on any quantity: it caps, trainop refuses
        raise ValueError(f"{what}: {text[:40]!r} is larger than {MAX_QUANTITY} (2^63-1)")
    if number != number.quantize(Decimal("0.001"), rounding=ROUND_CEILING):
        raise ValueError(f"{what}: {text[:40]!r} is finer than 1m (0.001), as in Kubernetes")
    return number


def is_queue_name(name: object) -> bool:
    return isinstance(name, str) and bool(_NAME.match(name))


def queue_of(labels: Mapping[str, str] | None) -> str | None:
    """The job's queue (None: not queued); InvalidJobError naming the label if it cannot be one."""
    name = (labels or {}).get(QUEUE_LABEL)
    if name is None:
        return None
    if not is_queue_name(name):
        expected = "a queue name (lower-case letters, digits and '-', at most 63 characters)"
        raise InvalidJobError([Problem(QUEUE_FIELD, f"{str(name)[:70]!r}: expected {expected}")])
    return name


def priority_of(
    labels: Mapping[str, str] | None, priority_class: str | None, classes: Mapping[str, int]
) -> int:
    """The value of the job's priority class (0 for none); InvalidJobError naming the field
    and the known classes if it is unknown. Kueue's label `kueue.x-k8s.io/priority-class` (a
    WorkloadPriorityClass there) wins over `priorityClass`, as in Kueue; both name a local class."""
    workload_class = (labels or {}).get(WORKLOAD_PRIORITY_LABEL)
    field = WORKLOAD_PRIORITY_FIELD if workload_class else PRIORITY_FIELD
    priority_class = workload_class or priority_class
    if not priority_class:
        return 0
    known = {**SYSTEM_PRIORITY_CLASSES, **classes}
    if priority_class in known:
        return known[priority_class]
    names = ", ".join(sorted(known))
    message = (
        f"priority class {priority_class[:70]!r} is not known here (known: {names}; "
        "`trainop queue priority NAME VALUE` defines one)"
    )
    raise InvalidJobError([Problem(field, message)])


def pod_requests(template: Mapping[str, Any]) -> Resources:
    """What one pod of `template` requests, with the local defaults (see the module docstring)."""
    spec = template.get("spec") or {}
    containers = [_container_requests(c, default_cpu=True) for c in spec.get("containers") or []]
    total = sum(containers, Resources())
    for init in spec.get("initContainers") or []:
        one = _container_requests(init, default_cpu=False)
        total = Resources(max(total.cpu, one.cpu), max(total.memory, one.memory))
    return total


def _container_requests(container: Mapping[str, Any], *, default_cpu: bool) -> Resources:
    resources = container.get("resources") or {}
    given = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    cpu = parse_quantity(given["cpu"]) if "cpu" in given else (DEFAULT_CPU if default_cpu else 0)
    memory = parse_quantity(given["memory"]) if "memory" in given else Decimal(0)
    return Resources(Decimal(cpu), memory)


def job_requests(replicas: Iterable[tuple[int, Mapping[str, Any]]]) -> Resources:
    """The sum over (replica count, pod template) pairs."""
    return sum((pod_requests(t).scaled(n) for n, t in replicas), Resources())


@dataclass(frozen=True)
class Entry:
    """One unfinished job of a queue, as the admission step sees it."""

    key: str  # namespace/name
    requests: Resources
    priority: int = 0
    enqueued: int = 0  # when it was submitted (ns since the epoch): FIFO within a priority
    admitted: bool = False


@dataclass(frozen=True)
class Decision:
    admit: tuple[str, ...]  # keys to admit now, in order
    waiting: Mapping[str, str]  # key -> why it waits


def decide(queue: str, quota: Resources, entries: Iterable[Entry]) -> Decision:
    """Admit, in priority then FIFO order, every waiting job that fits in what the admitted ones
    leave of `quota`; say for each of the others which resource is short."""
    entries = list(entries)
    used = sum((e.requests for e in entries if e.admitted), Resources())
    admit: list[str] = []
    waiting: dict[str, str] = {}
    for entry in sorted((e for e in entries if not e.admitted), key=_order):
        reason = _never_fits(queue, quota, entry.requests) or _short(queue, quota, used, entry)
        if reason:
            waiting[entry.key] = reason
        else:
            admit.append(entry.key)
            used = used + entry.requests
    return Decision(tuple(admit), waiting)


def _order(entry: Entry) -> tuple[int, int, str]:
    return (-entry.priority, entry.enqueued, entry.key)


def _never_fits(queue: str, quota: Resources, requests: Resources) -> str:
    name = next(_over(requests, quota), None)
    if name is None:
        return ""
    return (
        f"can never be admitted: it requests {_q(requests.get(name))} {name} and queue "
        f"{queue!r} has a quota of {_q(quota.get(name))} (`trainop queue set {queue} "
        f"--{name} ...` raises it)"
    )


def _short(queue: str, quota: Resources, used: Resources, entry: Entry) -> str:
    free = Resources(quota.cpu - used.cpu, quota.memory - used.memory)
    short = list(_over(entry.requests, free))
    if not short:
        return ""
    parts = [
        f"{name}: requests {_q(entry.requests.get(name))}, {_q(free.get(name))} of "
        f"{_q(quota.get(name))} free"
        for name in short
    ]
    names, details = ", ".join(short), "; ".join(parts)
    return f"insufficient unused quota in queue {queue!r} for {names} ({details})"


def _over(requests: Resources, available: Resources) -> Iterator[str]:
    return (name for name in RESOURCES if requests.get(name) > available.get(name))


def _q(value: Decimal) -> str:
    return format_quantity(value)
