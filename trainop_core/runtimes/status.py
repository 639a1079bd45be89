"""A planned TrainJob's status in Trainer's terms: conditions Suspended, Complete and Failed
(reason DeadlineExceeded when the deadline ended it), and jobsStatus for the trainer step.

Trainer has no Running condition (trainer#2713); the planner's Created/Running/Restarting stay
internal. Pure.
"""

from __future__ import annotations

from trainop_core.api import trainjob as v2
from trainop_core.api.job import TrainingJob
from trainop_core.api.types import ConditionType, JobCondition
from trainop_core.runtimes.policies.base import NODE

COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
_DEADLINE = "active longer than specified deadline"


def trainjob_status(job: TrainingJob) -> v2.TrainJobStatus:
    conditions = _conditions(job)
    return v2.TrainJobStatus(conditions=conditions, jobs_status=[_jobs_status(job, conditions)])


def trainjob_state(job: TrainingJob) -> str:
    """Complete, Failed or Suspended as Trainer says; else Running/Created as the SDK shows it."""
    return _state(job, _conditions(job))


def _conditions(job: TrainingJob) -> list[v2.Condition]:
    conditions = job.status.conditions if job.status else []
    return [c for c in (_translate(c) for c in conditions) if c is not None]


def _state(job: TrainingJob, translated: list[v2.Condition]) -> str:
    held = [c.type for c in translated if c.status == "True"]
    for state in (FAILED, COMPLETE, SUSPENDED):
        if state in held:
            return state
    conditions = job.status.conditions if job.status else []
    running = any(c.type == ConditionType.RUNNING and c.status.value == "True" for c in conditions)
    return "Running" if running else "Created"


def _translate(condition: JobCondition) -> v2.Condition | None:
    status = condition.status.value
    common = {"status": status, "last_transition_time": condition.last_transition_time}
    if condition.type == ConditionType.SUCCEEDED:
        return v2.Condition(
            type=COMPLETE, reason="JobsCompleted", message=condition.message, **common
        )
    if condition.type == ConditionType.FAILED:
        deadline = _DEADLINE in (condition.message or "")
        reason = "DeadlineExceeded" if deadline else "JobsFailed"
        return v2.Condition(type=FAILED, reason=reason, message=condition.message, **common)
    if condition.type == ConditionType.SUSPENDED:
        reason = SUSPENDED if status == "True" else "Resumed"
        return v2.Condition(type=SUSPENDED, reason=reason, message=condition.message, **common)
    return None


def _jobs_status(job: TrainingJob, translated: list[v2.Condition]) -> v2.ChildJobStatus:
    """The trainer step is one child Job (its pods are the nodes), counted as JobSet counts."""
    counts = (job.status.replica_statuses if job.status else {}).get(NODE)
    state = _state(job, translated)
    active = bool(counts and counts.active) and state not in (COMPLETE, FAILED)
    return v2.ChildJobStatus(
        name=v2.NODE,
        ready=int(active),
        active=int(active),
        succeeded=int(state == COMPLETE),
        failed=int(state == FAILED),
        suspended=int(state == SUSPENDED),
    )
