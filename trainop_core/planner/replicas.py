"""Per replica type: create missing pods and services, scale down, restart or fail failed pods.

Upstream's ReconcilePods/ReconcileServices, as pure decisions over the observed pods.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from trainop_core.api.types import ConditionType, ReplicaStatus, RestartPolicy
from trainop_core.kinds.base import ReplicaCounts
from trainop_core.planner.context import NORMAL, WARNING, Round, name_list
from trainop_core.planner.pods import build_pod, build_service, replica_selector
from trainop_core.planner.types import ObservedPod

# No terminated default container (e.g. an evicted pod): upstream's marker, counted as retryable.
NO_EXIT_CODE = 0xBEEF
RESTARTABLE = (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS)


def is_retryable(code: int | None) -> bool:
    """Exit codes 1-127 are the program's verdict; 128+ means a signal or the node killed it."""
    return (NO_EXIT_CODE if code is None else code) >= 128


def needs_restart(pod: ObservedPod, policy: RestartPolicy) -> bool:
    """A failed pod the operator re-creates (delete now, create again on a later round)."""
    if pod.phase != "Failed" or pod.deleting:
        return False
    if policy in RESTARTABLE:
        return True
    return policy == RestartPolicy.EXIT_CODE and is_retryable(pod.exit_code)


def pods_by_type(r: Round) -> dict[str, list[ObservedPod]]:
    grouped: dict[str, list[ObservedPod]] = defaultdict(list)
    for pod in r.observed.pods:
        grouped[pod.replica_type].append(pod)
    return grouped


def reconcile_replicas(r: Round) -> dict[str, ReplicaCounts]:
    """Plan every replica type's pods and services; returns what the kind's status rule reads."""
    pods = pods_by_type(r)
    services = {(s.replica_type, s.index) for s in r.observed.services}
    counts = {}
    for rtype, desired in r.replicas.items():
        current = [p for p in pods.get(rtype, []) if p.index < desired]
        if _may_start(r, rtype):
            _create_missing_pods(r, rtype, desired, current)
        _scale_down(r, [p for p in pods.get(rtype, []) if p.index >= desired])
        _handle_failed_pods(r, rtype, current)
        if r.kind.services:
            _reconcile_services(r, rtype, desired, services)
        counts[rtype] = _count(r, rtype, desired, current)
    return counts


def running_indices(r: Round, rtype: str) -> list[int]:
    """Indices of `rtype`'s wanted pods that run (and are not on their way out)."""
    desired = r.replicas.get(rtype, 0)
    return sorted(
        p.index
        for p in r.observed.pods
        if p.replica_type == rtype and p.index < desired and p.phase == "Running"
        and not p.deleting
    )  # fmt: skip


def _may_start(r: Round, rtype: str) -> bool:
    """`Kind.start_after`: a waiting type gets its pods once every pod it waits for runs."""
    waits_for = r.kind.start_after(r.cluster).get(rtype)
    if waits_for is None:
        return True
    return len(running_indices(r, waits_for)) == r.replicas.get(waits_for, 0)


def _create_missing_pods(r: Round, rtype: str, desired: int, current: list[ObservedPod]) -> None:
    present = {p.index for p in current}
    for index in range(desired):
        if index not in present:
            r.plan.create_pods.append(build_pod(r, rtype, index))


def _scale_down(r: Round, extra: Iterable[ObservedPod]) -> None:
    for pod in extra:
        if not pod.deleting:
            r.delete_pod(pod.name)


def _reconcile_services(r: Round, rtype: str, desired: int, seen: set[tuple[str, int]]) -> None:
    for index in range(desired):
        if (rtype, index) not in seen:
            r.plan.create_services.append(build_service(r, rtype, index))
    for svc in r.observed.services:
        if svc.replica_type == rtype and svc.index >= desired:
            r.delete_service(svc.name)


def _handle_failed_pods(r: Round, rtype: str, current: list[ObservedPod]) -> None:
    policy = r.restart_policy(rtype)
    _exited_events(r, current)
    for pod in current:
        if needs_restart(pod, policy):
            _restart(r, rtype, pod)
        elif pod.phase == "Failed" and policy == RestartPolicy.EXIT_CODE and not pod.deleting:
            message = f'job "{r.job.name}" is failing because "{rtype}" replica(s) failed.'
            r.event(WARNING, r.reason("Failed"), message)
            r.condition(ConditionType.FAILED, "Failed", message)


def _exited_events(r: Round, current: list[ObservedPod]) -> None:
    """ExitedWithCode for the type's ended pods, as upstream says it on every round: one event
    per exit code, naming its pods ("Pod: ns.a exited with code 0", upstream's own message, for
    one; "Pods: ns.a, ns.b exited with code 0" for several, `name_list`): the
    replicas of a job end together, and this is one Event to write, not one per replica."""
    by_code: dict[int, list[str]] = {}
    for pod in sorted(current, key=lambda p: p.index):
        if pod.exit_code is not None and pod.phase in ("Succeeded", "Failed") and not pod.deleting:
            by_code.setdefault(pod.exit_code, []).append(f"{r.job.namespace}.{pod.name}")
    for code, names in by_code.items():
        if len(names) == 1:
            r.event(NORMAL, "ExitedWithCode", f"Pod: {names[0]} exited with code {code}")
            continue
        r.event(NORMAL, "ExitedWithCode", f"Pods: {name_list(names)} exited with code {code}")


def _restart(r: Round, rtype: str, pod: ObservedPod) -> None:
    message = f"job {r.job.name} is restarting because {rtype} replica(s) failed."
    r.delete_pod(pod.name)
    r.plan.restarts += 1
    r.event(WARNING, r.reason("Restarting"), message)
    r.condition(ConditionType.RESTARTING, "Restarting", message)


def _count(r: Round, rtype: str, desired: int, current: list[ObservedPod]) -> ReplicaCounts:
    active = succeeded = failed = 0
    for pod in current:
        if pod.phase == "Running":
            # A Running pod being deleted is on a lost node or leaving: count it as failed.
            failed += pod.deleting
            active += not pod.deleting
        elif pod.phase == "Succeeded":
            succeeded += 1
        elif pod.phase == "Failed":
            failed += 1
    selector = replica_selector(r, rtype) if rtype == r.kind.scale_replica_type else None
    r.status.replica_statuses[rtype] = ReplicaStatus(
        active=active or None, succeeded=succeeded or None, failed=failed or None, selector=selector
    )
    return ReplicaCounts(desired, active, succeeded, failed, r.restart_policy(rtype))


def worker0_succeeded(r: Round) -> bool:
    """TF's default success policy: worker 0 (the implicit chief) exited cleanly."""
    return any(
        p.replica_type == "Worker"
        and p.index == 0
        and p.phase == "Succeeded"
        and p.exit_code in (0, None)
        for p in r.observed.pods
    )
