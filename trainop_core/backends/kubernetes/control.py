"""Stopping a running job from the client: record it Failed, then delete its live pods.

The status write is conditional (resourceVersion) so it cannot overwrite a status the operator
wrote meanwhile; the operator leaves a finished job's pods alone (cleanPodPolicy None), hence the
explicit pod deletion.
"""

from __future__ import annotations

import time
from typing import Any

from trainop_core.api.types import format_time, utc_now
from trainop_core.backends.kubernetes.errors import ApiError
from trainop_core.backends.kubernetes.jobs import JobStore
from trainop_core.backends.kubernetes.pods import Pods
from trainop_core.backends.kubernetes.trainjobs import is_trainjob
from trainop_core.backends.kubernetes.wait import is_finished
from trainop_core.errors import JobTimeoutError, NotFoundError
from trainop_core.kinds.base import Kind
from trainop_core.runtimes.status import encode_status

POLL_SECONDS = 0.2
CONFLICT_RETRIES = 10


def stop(
    jobs: JobStore, pods: Pods, kind: Kind, namespace: str, name: str, reason: str, timeout: float
) -> None:
    """Mark an unfinished job Failed with `reason`, then delete its pods and wait until none
    runs. A finished job is left as it is. JobTimeoutError if pods outlive `timeout` seconds."""
    if not _mark_failed(jobs, kind, namespace, name, reason):
        return
    deadline = time.monotonic() + timeout
    while live := [p for p in pods.of_job(kind, namespace, name) if p.live]:
        for pod in live:
            try:
                pods.delete(namespace, pod.pod)
            except NotFoundError:
                continue
        if time.monotonic() > deadline:
            names = ", ".join(p.pod for p in live)
            raise JobTimeoutError(f"pods still running {timeout:g}s after stop: {names}")
        time.sleep(POLL_SECONDS)


def _mark_failed(jobs: JobStore, kind: Kind, namespace: str, name: str, reason: str) -> bool:
    for _ in range(CONFLICT_RETRIES):
        obj = jobs.get(kind, namespace, name)
        if is_finished(obj):
            return False
        patch = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "status": _failed(obj.get("status") or {}, kind, name, reason),
        }
        try:
            jobs.patch_status(kind, namespace, name, patch)
            return True
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise ApiError(f"{kind.kind} {namespace}/{name}: status kept changing; not stopped", 409)


def _failed(status: dict[str, Any], kind: Kind, name: str, message: str) -> dict[str, Any]:
    """The status to merge; a TrainJob's is Trainer's, made from the planner's record failed
    (the record trainop's operator keeps in it and goes on from)."""
    if not is_trainjob(kind):
        return failed_status(status, kind, message)
    planner = dict(status.get("plannerStatus") or {})
    planner.update(failed_status(planner, kind, message))
    return encode_status(planner, name)


def failed_status(status: dict[str, Any], kind: Kind, message: str) -> dict[str, Any]:
    """Upstream's transition to Failed: Running (if any) becomes False, a Failed condition is
    appended, completionTime is set. Returns only the fields to merge."""
    now = format_time(utc_now())
    conditions = [dict(c) for c in status.get("conditions") or []]
    for condition in conditions:
        if condition.get("type") == "Running" and condition.get("status") == "True":
            condition.update(status="False", lastUpdateTime=now, lastTransitionTime=now)
    conditions.append(
        {
            "type": "Failed",
            "status": "True",
            "reason": f"{kind.kind}Failed",
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
    )
    return {"conditions": conditions, "completionTime": now}
