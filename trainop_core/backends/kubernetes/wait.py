"""Waiting for a job to finish: watch it, resuming after server time-outs, 410s and broken streams.

One GET, then watches from the last seen resourceVersion, each bounded by the time left (the
server ends it) and a client read time-out (a half-open TCP connection cannot hang us).
"""

from __future__ import annotations

import time
from typing import Any

from trainop_core.backends.kubernetes.errors import ApiError
from trainop_core.backends.kubernetes.jobs import JobStore, WatchExpired
from trainop_core.backends.kubernetes.trainjobs import is_trainjob_object, trainjob_finished
from trainop_core.errors import JobTimeoutError, NotFoundError
from trainop_core.kinds.base import Kind
from trainop_core.planner.conditions import is_finished_wire

WATCH_WINDOW = 300.0  # seconds per watch request (client-go uses 5-10 min)
RETRY_PAUSE = 0.5
RETRIABLE = (0, 429, 500, 503, 504)  # no answer, throttled, server trouble


def is_finished(obj: dict[str, Any]) -> bool:
    """Whether the job (a whole object, as the server returned it) Succeeded or Failed (a
    TrainJob: Complete or Failed, as Trainer says)."""
    if is_trainjob_object(obj):
        return trainjob_finished(obj)
    return is_finished_wire(obj.get("status") or {})


def wait_finished(
    store: JobStore, kind: Kind, namespace: str, name: str, timeout: float | None
) -> dict[str, Any]:
    """Block until the job Succeeded or Failed and return it; JobTimeoutError after `timeout`
    seconds (None: no limit); NotFoundError if it does not exist or is deleted meanwhile."""
    deadline = None if timeout is None else time.monotonic() + timeout
    what = f"{kind.kind} {namespace}/{name}"
    obj, version = store.snapshot(kind, namespace, name)
    while not is_finished(obj):
        left = _left(deadline, what, timeout)
        try:
            for kind_of_event, event_obj in store.watch(kind, namespace, name, version, left):
                if kind_of_event == "DELETED":
                    raise NotFoundError(f"{what} was deleted")
                version = _version(event_obj) or version
                if kind_of_event != "BOOKMARK":
                    obj = event_obj
                if is_finished(obj):
                    return obj
        except WatchExpired:  # compacted past our resourceVersion: read again at once
            obj, version = _reread(store, kind, namespace, name, obj, version)
        except ApiError as exc:  # a broken stream or a struggling server: pause, read again
            if exc.status not in RETRIABLE:
                raise
            time.sleep(min(RETRY_PAUSE, _left(deadline, what, timeout)))
            obj, version = _reread(store, kind, namespace, name, obj, version)
    return obj


def _reread(
    store: JobStore, kind: Kind, namespace: str, name: str, obj: dict[str, Any], version: str
) -> tuple[dict[str, Any], str]:
    """A fresh snapshot after a broken watch; the old one while the server is unreachable."""
    try:
        return store.snapshot(kind, namespace, name)
    except ApiError as exc:
        if exc.status not in RETRIABLE:
            raise
        return obj, version


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _left(deadline: float | None, what: str, timeout: float | None) -> float:
    if deadline is None:
        return WATCH_WINDOW
    left = deadline - time.monotonic()
    if left <= 0:
        raise JobTimeoutError(f"{what} did not finish within {timeout:g}s")
    return min(left, WATCH_WINDOW)
