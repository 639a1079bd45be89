"""Whole-job transitions: clean-up after the end, TTL, suspend/resume, backoff and deadline."""

from __future__ import annotations

from datetime import datetime

from trainop_core.api.types import CleanPodPolicy, ConditionType, RestartPolicy
from trainop_core.planner.conditions import is_true
from trainop_core.planner.context import NORMAL, Round
from trainop_core.planner.replicas import needs_restart
from trainop_core.planner.types import RESTARTS_ANNOTATION, ObservedPod

# Pods whose in-place container restarts count against backoffLimit (upstream's rule).
_COUNTED_POLICIES = (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS, RestartPolicy.EXIT_CODE)


# --- finished jobs ------------------------------------------------------------------------------


def _delete_replica(r: Round, pod: ObservedPod) -> None:
    r.delete_pod(pod.name)
    r.delete_service(pod.name)  # a replica's Service has its pod's name


def delete_everything(r: Round) -> None:
    for pod in r.observed.pods:
        if not pod.deleting:
            _delete_replica(r, pod)
    for svc in r.observed.services:
        r.delete_service(svc.name)
    if r.options.gang_scheduler_name:
        r.plan.delete_pod_group = True


def clean_up(r: Round) -> None:
    """Delete what cleanPodPolicy says once the job has ended (None keeps everything)."""
    policy = r.job.spec.run_policy.clean_pod_policy or CleanPodPolicy.NONE
    if policy == CleanPodPolicy.ALL:
        delete_everything(r)
    elif policy == CleanPodPolicy.RUNNING:
        for pod in r.observed.pods:
            if pod.phase in ("Running", "Pending") and not pod.deleting:
                _delete_replica(r, pod)
    if r.options.gang_scheduler_name:
        r.plan.delete_pod_group = True


def expire(r: Round) -> None:
    """ttlSecondsAfterFinished: delete the job when it is due, else look again exactly then."""
    ttl = r.job.spec.run_policy.ttl_seconds_after_finished
    finished_at = r.status.completion_time
    if ttl is None or finished_at is None:
        return
    remaining = seconds_left(ttl, finished_at, r.now)
    if remaining <= 0:
        r.plan.delete_job = True
        r.plan.metrics.append("deleted")
    else:
        r.requeue(remaining)


def settle_finished(r: Round) -> None:
    """Upstream step 4: a finished job only gets cleaned up, counted as done, and expired."""
    clean_up(r)
    if is_true(r.status, ConditionType.SUCCEEDED):
        for rs in r.status.replica_statuses.values():
            if rs.active:
                rs.succeeded = (rs.succeeded or 0) + rs.active
                rs.active = None
    expire(r)


def mark_completed(r: Round) -> None:
    if r.status.completion_time is None:
        r.status.completion_time = r.now


# --- suspend / resume ---------------------------------------------------------------------------


def suspend(r: Round) -> None:
    """runPolicy.suspend: nothing may run. Pods, services and the PodGroup go; status says why."""
    delete_everything(r)
    for rs in r.status.replica_statuses.values():
        rs.active = None
    message = f"{r.kind.kind} {r.job.name} is suspended."
    if is_true(r.status, ConditionType.RUNNING):
        r.condition(ConditionType.RUNNING, "Suspended", message, status=False)
    if r.condition(ConditionType.SUSPENDED, "Suspended", message):
        r.event(NORMAL, r.reason("Suspended"), message)


def resume_if_suspended(r: Round) -> None:
    """Leaving suspension restarts the clock: activeDeadlineSeconds counts from now."""
    if not is_true(r.status, ConditionType.SUSPENDED):
        return
    message = f"{r.kind.kind} {r.job.name} is resumed."
    r.condition(ConditionType.SUSPENDED, "Resumed", message, status=False)
    r.event(NORMAL, r.reason("Resumed"), message)
    r.status.start_time = r.now


# --- limits -------------------------------------------------------------------------------------


def recorded_restarts(r: Round) -> int:
    value = (r.job.metadata.annotations or {}).get(RESTARTS_ANNOTATION, "0")
    return int(value) if value.isdigit() else 0


def pending_restarts(r: Round) -> int:
    """Failed pods this round will re-create."""
    return sum(needs_restart(p, r.restart_policy(p.replica_type)) for p in r.observed.pods)


def _in_place_restarts(r: Round) -> int:
    return sum(
        p.restart_count
        for p in r.observed.pods
        if p.phase == "Running" and r.restart_policy(p.replica_type) in _COUNTED_POLICIES
    )


def past_backoff_limit(r: Round) -> bool:
    """Kubelet restarts of running pods, plus operator re-creations (recorded and about to
    happen), reach backoffLimit. 0 means no restart at all is allowed."""
    limit = r.job.spec.run_policy.backoff_limit
    if limit is None:
        return False
    total = _in_place_restarts(r) + recorded_restarts(r) + pending_restarts(r)
    return total > 0 and total >= limit


def deadline_remaining(r: Round) -> float | None:
    """Seconds left before activeDeadlineSeconds (counted from startTime) runs out."""
    deadline = r.job.spec.run_policy.active_deadline_seconds
    if deadline is None or r.status.start_time is None:
        return None
    return seconds_left(deadline, r.status.start_time, r.now)


def seconds_left(seconds: int, since: datetime, now: datetime) -> float:
    """`seconds` after `since`, counted from `now`. Plain arithmetic: `since + timedelta(...)`
    overflows for an int64 deadline the API accepts (9e18 s is far beyond year 9999)."""
    return seconds - (now - since).total_seconds()


def limit_failure(r: Round) -> str:
    """The Failed message if a run-policy limit has been hit, else ""."""
    if past_backoff_limit(r):
        return f"Job {r.job.name} has failed because it has reached the specified backoff limit"
    remaining = deadline_remaining(r)
    if remaining is not None and remaining <= 0:
        return f"Job {r.job.name} has failed because it was active longer than specified deadline"
    return ""


def fail_for_limits(r: Round, message: str) -> None:
    """Every pod and service goes whatever cleanPodPolicy says (upstream), then the job fails."""
    mark_completed(r)
    delete_everything(r)
    if r.options.gang_scheduler_name:
        r.event(NORMAL, "JobTerminated", "Job has been terminated. Deleting PodGroup")
    r.event(NORMAL, r.reason("Failed"), message)
    r.condition(ConditionType.FAILED, "Failed", message)
    expire(r)
