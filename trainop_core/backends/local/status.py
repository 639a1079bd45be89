"""Reading job status on the wire form (dicts), and the one status the supervisor writes itself.

Everything else about status is the planner's; the only exception is a job stopped by its user
(Ctrl-C on `trainop run`, a timeout), which no planner input expresses. Even then the condition
is set by the planner's own `set_condition`, so the rules stay in one place.
"""

from __future__ import annotations

from typing import Any

from trainop_core.api.types import ConditionStatus, ConditionType, JobStatus, utc_now
from trainop_core.planner.conditions import is_finished_wire as is_finished

__all__ = ["failed_status", "is_finished"]


def failed_status(status: dict[str, Any], kind: str, message: str) -> dict[str, Any]:
    """`status` with condition Failed (reason `<Kind>Failed`, `message`), completionTime set and
    active replicas counted as failed; unchanged if the job had already failed."""
    from trainop_core.planner.conditions import set_condition

    model = JobStatus.model_validate(status)
    now = utc_now()
    reason = f"{kind}Failed"
    if not set_condition(model, ConditionType.FAILED, ConditionStatus.TRUE, reason, message, now):
        return status
    model.completion_time = model.completion_time or now
    for replica in model.replica_statuses.values():
        replica.failed = (replica.failed or 0) + (replica.active or 0)
        replica.active = 0
    return model.to_dict()
