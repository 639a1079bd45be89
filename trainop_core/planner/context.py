"""One planning round's working state: the defaulted job, what was observed, the plan so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import ConditionStatus, ConditionType, JobStatus, RestartPolicy
from trainop_core.decorators import PodDecorator
from trainop_core.kinds.base import Addressing, ClusterContext, Kind
from trainop_core.planner.conditions import set_condition
from trainop_core.planner.types import Event, Observed, Plan, PlanOptions
from trainop_core.replicas import replica_counts

NORMAL = "Normal"
WARNING = "Warning"
NAMED_IN_EVENT = 10  # an Event about several children names at most this many


def name_list(names: Sequence[str]) -> str:
    """Names for an Event's message, "a, b, c"; beyond NAMED_IN_EVENT of them "... and N more"."""
    more = len(names) - NAMED_IN_EVENT
    return ", ".join(names[:NAMED_IN_EVENT]) + (f" and {more} more" if more > 0 else "")


@dataclass
class Round:
    """Mutable only while one `plan` call runs; `job.status` is the status being built."""

    job: TrainingJob  # defaulted private copy
    kind: Kind
    observed: Observed
    now: datetime
    addressing: Addressing
    options: PlanOptions
    decorators: Sequence[PodDecorator]
    plan: Plan = field(default_factory=Plan)

    def __post_init__(self) -> None:
        if self.job.status is None:
            self.job.status = JobStatus()
        self.replicas = replica_counts(self.job, self.kind)
        self.cluster = ClusterContext(
            job=self.job,
            replicas=self.replicas,
            addressing=self.addressing,
            kind_options=self.options.kind_options,
        )
        self._deleted: set[tuple[str, str]] = set()
        self.warned: set[tuple[str, str]] = set()  # (replica type, reason): warn once per plan
        self.owner: dict[str, Any] = {
            "apiVersion": self.job.api_version,
            "kind": self.kind.kind,
            "name": self.job.name,
            "uid": self.job.metadata.uid or "",
            "controller": True,
            "blockOwnerDeletion": True,
        }

    @property
    def status(self) -> JobStatus:
        assert self.job.status is not None  # set in __post_init__
        return self.job.status

    def restart_policy(self, rtype: str) -> RestartPolicy:
        spec = self.job.spec.replica_specs.get(rtype)
        policy = spec.restart_policy if spec else None
        return policy or self.kind.default_restart_policy

    def reason(self, suffix: str) -> str:
        """Upstream's `<Kind><Reason>` spelling, e.g. PyTorchJobRunning."""
        return f"{self.kind.kind}{suffix}"

    def event(self, etype: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(etype, reason, message))

    def condition(
        self, ctype: ConditionType, suffix: str, message: str, status: bool = True
    ) -> bool:
        cstatus = ConditionStatus.TRUE if status else ConditionStatus.FALSE
        return set_condition(self.status, ctype, cstatus, self.reason(suffix), message, self.now)

    def requeue(self, seconds: float) -> None:
        """Ask to be planned again within `seconds` (the soonest request wins)."""
        seconds = max(seconds, 0.0)
        current = self.plan.requeue_after
        self.plan.requeue_after = seconds if current is None else min(current, seconds)

    def delete_pod(self, name: str) -> None:
        if ("pod", name) not in self._deleted:
            self._deleted.add(("pod", name))
            self.plan.delete_pods.append(name)

    def delete_service(self, name: str) -> None:
        if ("svc", name) not in self._deleted:
            self._deleted.add(("svc", name))
            self.plan.delete_services.append(name)
