"""A planned TrainJob's status in Trainer's terms: conditions Suspended, Complete and Failed
(reason DeadlineExceeded when the deadline ended it), and jobsStatus for the trainer step.

Trainer has no Running condition (trainer#2713); the planner's Created/Running/Restarting stay
internal. Pure.
"""

from __future__ import annotations

from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.job import TrainingJob
from trainop_core.api.types import ConditionType, JobCondition, JobStatus
from trainop_core.progress import trainer_status_of
from trainop_core.runtimes.policies.base import LAUNCHER, NODE

COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
_DEADLINE = "active longer than specified deadline"


def encode_status(status: dict[str, Any]) -> dict[str, Any]:
    """The planner's status (kubeflow.org/v1 JobStatus wire form) as a TrainJob's status:
    Trainer's, with the planner's record kept in `plannerStatus` (what trainop's operator writes
    and goes on from)."""
    trainer = status_from(JobStatus.model_validate(status))
    trainer.planner_status = status
    return trainer.to_dict()


def decode_status(status: dict[str, Any] | None) -> JobStatus | None:
    """The planner's record a TrainJob's status keeps (`plannerStatus`), or None."""
    planner = (status or {}).get("plannerStatus")
    return JobStatus.model_validate(planner) if isinstance(planner, dict) else None


def trainjob_status(job: TrainingJob) -> v2.TrainJobStatus:
    """Trainer's status of a planned TrainJob, its progress (`trainop_core.progress`) as
    `trainerStatus`."""
    status = status_from(job.status)
    progress = trainer_status_of(job)
    if progress is not None:
        status.trainer_status = v2.TrainerStatus.model_validate(progress.to_wire())
    return status


def status_from(planned: JobStatus | None) -> v2.TrainJobStatus:
    """Trainer's status for the planner's status of a TrainJob."""
    conditions = _conditions(planned)
    steps = [(LAUNCHER, v2.LAUNCHER)] if LAUNCHER in _replica_statuses(planned) else []
    jobs = [_jobs_status(planned, conditions, r, n) for r, n in [*steps, (NODE, v2.NODE)]]
    return v2.TrainJobStatus(conditions=conditions, jobs_status=jobs)


def _replica_statuses(planned: JobStatus | None) -> dict[str, Any]:
    return dict(planned.replica_statuses) if planned and planned.replica_statuses else {}


def trainjob_state(job: TrainingJob) -> str:
    """Complete, Failed or Suspended as Trainer says; else Running/Created as the SDK shows it."""
    return _state(job.status, _conditions(job.status))


def _conditions(planned: JobStatus | None) -> list[v2.Condition]:
    conditions = planned.conditions if planned else []
    return [c for c in (_translate(c) for c in conditions) if c is not None]


def _state(planned: JobStatus | None, translated: list[v2.Condition]) -> str:
    held = [c.type for c in translated if c.status == "True"]
    for state in (FAILED, COMPLETE, SUSPENDED):
        if state in held:
            return state
    conditions = planned.conditions if planned else []
    running = any(c.type == ConditionType.RUNNING and c.status.value == "True" for c in conditions)
    return "Running" if running else "Created"


def _translate(condition: JobCondition) -> v2.Condition | None:
    status = condition.status.value
    when = condition.last_transition_time or condition.last_update_time
    common = {"status": status, "last_transition_time": when}
    if condition.type == ConditionType.SUCCEEDED:
        return v2.Condition(
            type=COMPLETE, reason="JobsCompleted", message=condition.message or "", **common
        )
    if condition.type == ConditionType.FAILED:
        deadline = _DEADLINE in (condition.message or "")
        reason = "DeadlineExceeded" if deadline else "JobsFailed"
        return v2.Condition(type=FAILED, reason=reason, message=condition.message or "", **common)
    if condition.type == ConditionType.SUSPENDED:
        reason = SUSPENDED if status == "True" else "Resumed"
        return v2.Condition(
            type=SUSPENDED, reason=reason, message=condition.message or "", **common
        )
    return None


def _jobs_status(
    planned: JobStatus | None, translated: list[v2.Condition], rtype: str, name: str
) -> v2.ChildJobStatus:
    """Each step (the nodes; an mpi job's launcher too) is one child Job, counted as JobSet
    counts it."""
    counts = _replica_statuses(planned).get(rtype)
    state = _state(planned, translated)
    active = bool(counts and counts.active) and state not in (COMPLETE, FAILED)
    return v2.ChildJobStatus(
        name=name,
        ready=int(active),
        active=int(active),
        succeeded=int(state == COMPLETE),
        failed=int(state == FAILED),
        suspended=int(state == SUSPENDED),
    )
