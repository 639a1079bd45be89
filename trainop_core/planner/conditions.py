"""The job-condition algorithm every kind shares (upstream's `setCondition`), on a JobStatus.

- A job that has Failed=True never changes its conditions again (terminal, sticky).
- Same type, status and reason: nothing changes (timestamps untouched).
- Same type and status, new reason: replaced, keeping the old lastTransitionTime.
- The new condition is appended last, so `conditions[-1]` is the newest (the `State` column).
- Running and Restarting exclude each other (the other is removed, not set to False).
- Succeeded or Failed turn an existing Running into Running=False.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trainop_core.api.types import (
    ConditionStatus,
    ConditionType,
    JobCondition,
    JobStatus,
    utc_now,
)

TRUE = ConditionStatus.TRUE
FALSE = ConditionStatus.FALSE
_EXCLUSIVE = {
    ConditionType.RUNNING: ConditionType.RESTARTING,
    ConditionType.RESTARTING: ConditionType.RUNNING,
}
_ENDINGS = (ConditionType.SUCCEEDED, ConditionType.FAILED)


def find(status: JobStatus, ctype: ConditionType) -> JobCondition | None:
    return next((c for c in status.conditions if c.type == ctype), None)


def is_true(status: JobStatus, ctype: ConditionType) -> bool:
    found = find(status, ctype)
    return found is not None and found.status == TRUE


def is_finished(status: JobStatus) -> bool:
    return is_true(status, ConditionType.SUCCEEDED) or is_true(status, ConditionType.FAILED)


def is_finished_wire(status: Mapping[str, Any]) -> bool:
    """`is_finished` on a status in its wire form (JSON), for callers that never parse it."""
    endings = {c.value for c in _ENDINGS}
    conditions = status.get("conditions") or []
    return any(c.get("type") in endings and c.get("status") == TRUE.value for c in conditions)


def failed_status(
    status: Mapping[str, Any], kind: str, message: str, suffix: str = "Failed"
) -> dict[str, Any]:
    """`status` (wire form) with condition Failed (reason `<Kind><suffix>`, `message`),
    completionTime set and active replicas counted as failed; unchanged if it had already failed.

    For the failures a backend records itself, not the planner: a job stopped by its user (or
    one that cannot be placed, or refused by a decorator server), which no planner input
    expresses."""
    model = JobStatus.model_validate(status)
    now = utc_now()
    if not set_condition(model, ConditionType.FAILED, TRUE, f"{kind}{suffix}", message, now):
        return dict(status)
    model.completion_time = model.completion_time or now
    for replica in model.replica_statuses.values():
        replica.failed = (replica.failed or 0) + (replica.active or 0)
        replica.active = 0
    return model.to_dict()


def set_condition(
    status: JobStatus,
    ctype: ConditionType,
    cstatus: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
) -> bool:
    """Record a condition per the rules above; returns whether anything changed."""
    if is_true(status, ConditionType.FAILED):
        return False
    current = find(status, ctype)
    if current is not None and current.status == cstatus and current.reason == reason:
        return False
    kept_transition = current is not None and current.status == cstatus
    condition = JobCondition(
        type=ctype,
        status=cstatus,
        reason=reason,
        message=message,
        last_update_time=now,
        last_transition_time=current.last_transition_time if kept_transition and current else now,
    )
    status.conditions = [*_others(status.conditions, ctype, now), condition]
    return True


def _others(
    conditions: list[JobCondition], ctype: ConditionType, now: datetime
) -> list[JobCondition]:
    kept = []
    for c in conditions:
        if c.type == ctype or c.type == _EXCLUSIVE.get(ctype):
            continue
        if ctype in _ENDINGS and c.type == ConditionType.RUNNING and c.status == TRUE:
            # A status flip is a transition; upstream leaves the old times, we record it.
            c = c.model_copy(
                update={"status": FALSE, "last_update_time": now, "last_transition_time": now}
            )
        kept.append(c)
    return kept
