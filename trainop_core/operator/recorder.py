"""Records core/v1 Events on a job, asynchronously, as client-go's event broadcaster does.

`record()` never blocks a reconcile: events go into a bounded queue that one daemon thread writes
through its own client (so event writes do not use up the reconcilers' token bucket, as
controller-runtime gives its recorder its own client). A full queue drops the event (logged), a
failed write is logged: events are best effort, never a reason to fail or retry a reconcile.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from trainop_core.api.types import format_time, utc_now
from trainop_core.operator.kube import EVENTS, ApiError, KubeClient, Obj

log = logging.getLogger(__name__)
# One operator records for every kind, so a burst of N jobs queues ~13 N events within seconds:
# client-go's 1,000 dropped more than half of them at 400 jobs (benchmarks/operator_scale.py).
# An event is about 1 KiB, so this bounds the backlog at ~10 MiB.
QUEUE_SIZE = 10_000


class EventRecorder:
    """Writes Events whose `source.component` is the recording controller's name."""

    def __init__(self, client: KubeClient, queue_size: int = QUEUE_SIZE) -> None:
        self.client = client
        self._queue: queue.Queue[Obj | None] = queue.Queue(queue_size)
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def record(self, job: Obj, type_: str, reason: str, message: str, component: str) -> None:
        """Queue an event about `job` (no I/O here)."""
        try:
            self._queue.put_nowait(_event(job, type_, reason, message, component))
        except queue.Full:
            log.warning("event queue full: dropping %s on %s", reason, _name(job))

    def stop(self, timeout: float = 2.0) -> None:
        """Write what is queued (for up to `timeout` seconds), then stop."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                self.client.create(EVENTS, event["metadata"]["namespace"], event)
            except ApiError as exc:
                log.info(
                    "event %s on %s not recorded: %s",
                    event["reason"],
                    event["involvedObject"]["name"],
                    exc,
                )


def _event(job: Obj, type_: str, reason: str, message: str, component: str) -> Obj:
    meta, now = job.get("metadata", {}), format_time(utc_now())
    namespace = str(meta.get("namespace", "default"))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{_name(job)}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": job.get("apiVersion", ""),
            "kind": job.get("kind", ""),
            "name": meta.get("name", ""),
            "namespace": namespace,
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _name(job: Obj) -> str:
    return str(job.get("metadata", {}).get("name", ""))
