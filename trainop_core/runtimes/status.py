"""A planned TrainJob's status in Trainer's terms: conditions Suspended, Complete and Failed
with Trainer v2.3.0's reasons and messages, and jobsStatus for the trainer step.

Trainer copies a JobSet's Completed/Failed condition (JobSet v0.12.0's reasons and messages;
trainop's runtimes carry no JobSet failurePolicy, so a failure is JobSet's `FailedJobs`, naming
the first failed child Job `<job>-<step>-0`), and sets Suspended and DeadlineExceeded itself.
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
_DEADLINE = "active longer than specified deadline"  # the planner's (planner/lifecycle.py)
# The planner's reason for a failure of the job's pods (and for `trainop stop`); a failure trainop
# records for its own reasons (e.g. TrainJobFailedDecoration) keeps its reason and message.
_PLANNER_FAILED = "TrainJobFailed"

# (reason, message) as Trainer v2.3.0 writes them (pkg/constants, pkg/controller) and as it
# copies them from JobSet v0.12.0 (pkg/constants, controllers/failure_policy.go).
TRAINER_CONDITIONS = {
    (COMPLETE, "True"): ("AllJobsCompleted", "jobset completed successfully"),
    (FAILED, "True"): ("FailedJobs", "jobset failed due to one or more job failures"),
    (SUSPENDED, "True"): ("Suspended", "TrainJob is suspended"),
    (SUSPENDED, "False"): ("Resumed", "TrainJob is resumed"),
}
DEADLINE_EXCEEDED = ("DeadlineExceeded", "TrainJob exceeded its active deadline")


def encode_status(status: dict[str, Any], name: str) -> dict[str, Any]:
    """The planner's status (kubeflow.org/v1 JobStatus wire form) of TrainJob `name` as its
    status: Trainer's, with the planner's record kept in `plannerStatus` (what trainop's operator
    writes and goes on from)."""
    trainer = status_from(JobStatus.model_validate(status), name)
    trainer.planner_status = status
    return trainer.to_dict()


def decode_status(status: dict[str, Any] | None) -> JobStatus | None:
    """The planner's record a TrainJob's status keeps (`plannerStatus`), or None."""
    planner = (status or {}).get("plannerStatus")
    return JobStatus.model_validate(planner) if isinstance(planner, dict) else None


def trainjob_status(job: TrainingJob) -> v2.TrainJobStatus:
    """Trainer's status of a planned TrainJob, its progress (`trainop_core.progress`) as
    `trainerStatus`."""
    status = status_from(job.status, job.name)
    progress = trainer_status_of(job)
    if progress is not None:
        status.trainer_status = v2.TrainerStatus.model_validate(progress.to_wire())
    return status


def status_from(planned: JobStatus | None, name: str) -> v2.TrainJobStatus:
    """Trainer's status for the planner's status of TrainJob `name`."""
    conditions = _conditions(planned, name)
    steps = [(LAUNCHER, v2.LAUNCHER)] if LAUNCHER in _replica_statuses(planned) else []
    jobs = [_jobs_status(planned, conditions, r, n) for r, n in [*steps, (NODE, v2.NODE)]]
    return v2.TrainJobStatus(conditions=conditions, jobs_status=jobs)


def _replica_statuses(planned: JobStatus | None) -> dict[str, Any]:
    return dict(planned.replica_statuses) if planned and planned.replica_statuses else {}


def trainjob_state(job: TrainingJob) -> str:
    """Complete, Failed or Suspended as Trainer says; else Running/Created as the SDK shows it."""
    return _state(job.status, _conditions(job.status, job.name))


def _conditions(planned: JobStatus | None, name: str) -> list[v2.Condition]:
    conditions = planned.conditions if planned else []
    failed_job = f"{name}-{_first_failed_step(planned)}-0"
    return [c for c in (_translate(c, failed_job) for c in conditions) if c is not None]


def _first_failed_step(planned: JobStatus | None) -> str:
    """The child Job JobSet would name: the launcher's when it failed (it ends an mpi job),
    else the nodes'."""
    launcher = _replica_statuses(planned).get(LAUNCHER)
    return v2.LAUNCHER if launcher is not None and launcher.failed else v2.NODE


def _state(planned: JobStatus | None, translated: list[v2.Condition]) -> str:
    held = [c.type for c in translated if c.status == "True"]
    for state in (FAILED, COMPLETE, SUSPENDED):
        if state in held:
            return state
    conditions = planned.conditions if planned else []
    running = any(c.type == ConditionType.RUNNING and c.status.value == "True" for c in conditions)
    return "Running" if running else "Created"


def _translate(condition: JobCondition, failed_job: str) -> v2.Condition | None:
    ctype = _TYPES.get(condition.type)
    if ctype is None:
        return None
    status = condition.status.value
    reason, message = TRAINER_CONDITIONS.get((ctype, status), (condition.reason or ctype, ""))
    if ctype == FAILED and _DEADLINE in (condition.message or ""):
        reason, message = DEADLINE_EXCEEDED
    elif ctype == FAILED and condition.reason not in (None, _PLANNER_FAILED):
        reason, message = condition.reason, condition.message or ""  # trainop's own, no Trainer's
    elif ctype == FAILED:
        message = f"{message} (first failed job: {failed_job})"  # JobSet's form
    when = condition.last_transition_time or condition.last_update_time
    return v2.Condition(
        type=ctype, status=status, reason=reason, message=message, last_transition_time=when
    )


_TYPES = {
    ConditionType.SUCCEEDED: COMPLETE,
    ConditionType.FAILED: FAILED,
    ConditionType.SUSPENDED: SUSPENDED,
}


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
