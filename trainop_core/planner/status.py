"""The kind's verdict as conditions, events and metrics; whether the status changed at all."""

from __future__ import annotations

from typing import Any

from trainop_core.api.types import ConditionType, JobStatus
from trainop_core.kinds.base import ReplicaCounts, Verdict
from trainop_core.planner.conditions import is_finished, is_true
from trainop_core.planner.context import NORMAL, WARNING, Round
from trainop_core.planner.lifecycle import mark_completed
from trainop_core.planner.replicas import worker0_succeeded

_VERDICT_CONDITIONS = {
    "Running": ConditionType.RUNNING,
    "Restarting": ConditionType.RESTARTING,
    "Succeeded": ConditionType.SUCCEEDED,
    "Failed": ConditionType.FAILED,
}


def acknowledge(r: Round) -> None:
    """Created on the first plan (upstream sets it in the create-event predicate)."""
    message = f"{r.kind.kind} {r.job.name} is created."
    if not any(c.type == ConditionType.CREATED for c in r.status.conditions):
        r.condition(ConditionType.CREATED, "Created", message)
        r.plan.metrics.append("created")


def judge(r: Round, counts: dict[str, ReplicaCounts]) -> None:
    """Apply the kind's status rule to this round's counts (its verdicts in order)."""
    result = r.kind.status(r.job, counts, worker0_succeeded(r))
    for verdict in [result] if isinstance(result, Verdict) else result:
        ctype = _VERDICT_CONDITIONS.get(verdict.state)
        if ctype is not None and r.condition(ctype, verdict.state, verdict.message):
            _announce(r, verdict)


def _announce(r: Round, verdict: Verdict) -> None:
    if verdict.state == "Succeeded":
        r.event(NORMAL, r.reason("Succeeded"), verdict.message)
    elif verdict.state == "Failed":
        r.event(NORMAL, r.reason("Failed"), verdict.message)
    elif verdict.state == "Restarting":
        r.event(WARNING, r.reason("Restarting"), verdict.message)


def finish_if_done(r: Round) -> bool:
    """A job that ended this round gets its completionTime, and no new pods."""
    if not is_finished(r.status):
        return False
    mark_completed(r)
    r.plan.create_pods.clear()
    r.plan.create_services.clear()
    r.plan.apply_objects.clear()
    r.plan.pod_group = None  # clean-up deletes it instead
    return True


def transition_metrics(before: JobStatus | None, after: JobStatus) -> list[str]:
    """Job-level counters: each ending is counted once, on the round it happened."""
    metrics = []
    for ctype, metric in (
        (ConditionType.SUCCEEDED, "successful"),
        (ConditionType.FAILED, "failed"),
    ):
        if is_true(after, ctype) and not (before is not None and is_true(before, ctype)):
            metrics.append(metric)
    return metrics


def wire(status: JobStatus | None) -> dict[str, Any]:
    return status.to_dict() if status is not None else {}


def changed_status(before: JobStatus | None, after: JobStatus) -> JobStatus | None:
    """`after` if it differs from what is stored, else None (no write)."""
    return None if wire(before) == wire(after) else after
