"""The node's Events (``Unhealthy``, ``Killing``...), written off the sync loop.

:meth:`EventRecorder.record` only queues (bounded: when the API is slow, events beyond the queue
are dropped and counted, as a kubelet's broadcaster drops them); one thread writes them. The same
event again (same pod, container, reason and message) bumps the ``count`` and
``lastTimestamp`` of the one written, as a kubelet's event correlator does.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from trainop_core.testing.rest import Rest, RestError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
QUEUE_LIMIT = 256
REMEMBERED = 1024  # aggregated events kept (oldest forgotten first)


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: Obj) -> PodRef:
        meta = pod["metadata"]
        return cls(str(meta["namespace"]), str(meta["name"]), str(meta["uid"]))


class EventRecorder:
    """Writes core/v1 Events about pods as component ``kubelet`` of node `host`."""

    def __init__(self, rest: Rest, host: str) -> None:
        self.rest, self.host = rest, host
        self.dropped = 0
        self._queue: queue.Queue[tuple[PodRef, str, str, str, str, str] | None] = queue.Queue(
            QUEUE_LIMIT
        )
        self._written: dict[tuple[Any, ...], tuple[str, int]] = {}  # key -> (name, count)
        self._thread: threading.Thread | None = None

    def start(self) -> EventRecorder:
        self._thread = threading.Thread(target=self._loop, name="events", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)

    def record(self, pod: PodRef, container: str, kind: str, reason: str, message: str) -> None:
        """Queue an event about `container` of `pod` (kind Normal or Warning). Never blocks."""
        try:
            self._queue.put_nowait((pod, container, kind, reason, message[:1024], _now()))
        except queue.Full:
            self.dropped += 1

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._write(*item)
            except RestError as err:
                log.info("event %s for pod %s/%s not written: %s", item[3], item[0].namespace,
                         item[0].name, err)  # fmt: skip
            except Exception:  # one bad event must not end the recorder
                log.exception("event not written")

    def _write(
        self, pod: PodRef, container: str, kind: str, reason: str, message: str, at: str
    ) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/events"
        key = (pod.uid, container, kind, reason, message)
        held = self._written.get(key)
        if held is not None:
            name, count = held
            self.rest.patch(f"{path}/{name}", {"count": count + 1, "lastTimestamp": at})
            self._written[key] = (name, count + 1)
            return
        name = f"{pod.name}.{time.time_ns():x}"
        field = f"spec.containers{{{container}}}" if container else ""
        involved = {"kind": "Pod", "apiVersion": "v1", "namespace": pod.namespace,
                    "name": pod.name, "uid": pod.uid, "fieldPath": field}  # fmt: skip
        self.rest.create(path, {
            "metadata": {"name": name, "namespace": pod.namespace},
            "involvedObject": involved, "reason": reason, "message": message, "type": kind,
            "source": {"component": "kubelet", "host": self.host},
            "reportingComponent": "kubelet", "reportingInstance": self.host,
            "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        })  # fmt: skip
        if len(self._written) >= REMEMBERED:
            self._written.pop(next(iter(self._written)))
        self._written[key] = (name, 1)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
