"""Training progress on Kubernetes: the operator reads each running job's primary pod's log
through the API and writes what it reports as the job's progress (`trainop_core.progress`).

Why the log: it is where every instrumented loop already writes (Katib's StdOut collector and
trainop's trial runner read the same lines), and what any cluster serves the operator without
anything in the job's pods: no sidecar, no network path from the pods to the operator, no token
or certificate in the job's namespace (Kubeflow Trainer's own endpoint, KEP-2779, needs all
three). The operator already holds more over these pods than reading their logs.

Cost, bounded whatever the replicas print: one GET of the primary pod's log per job every
`interval` seconds while it reports, backing off to `QUIET_SECONDS` while it reports nothing;
each read asks only for what is new (`sinceTime`, kubelet timestamps to drop what was already
read), at most `TAIL_LINES` lines and `LIMIT_BYTES`; one more read when the pod ends; and at most
one write per job every `interval` seconds (once more when the pod ends), only when the progress
changed. Reads and writes take only spare tokens of the operator's rate limit (as events do), so
reconciles go first; they run on one thread, serially. A TrainJob's progress is a merge patch of
`status.trainerStatus`, a v1 job's one of its annotation; the controllers ignore the echo.
"""

from __future__ import annotations

import calendar
import heapq
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from trainop_core.kinds.base import Kind
from trainop_core.operator.informer import object_key
from trainop_core.operator.kube import MERGE_PATCH, PODS, ApiError, KubeClient, Obj, Resource
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.observe import controller_ref, observe_pod
from trainop_core.operator.ratelimit import TokenBucket
from trainop_core.operator.recorder import EventRecorder
from trainop_core.progress import (
    ANNOTATION,
    WRITE_INTERVAL,
    JobProgress,
    TrainerStatus,
    WriteGate,
    decode_annotation,
    dropped_message,
    encode_annotation,
)

log = logging.getLogger(__name__)
TAIL_LINES = 256
LIMIT_BYTES = 64 * 1024
QUIET_SECONDS = 60.0  # how seldom, at most, a pod that reports nothing is read
PATIENCE = 30.0  # seconds a read or write waits for a spare token before queueing for one
MAX_KNOWN_JOBS = 4096  # jobs whose primary replica is remembered
FOLLOWED = ("Running", "Succeeded", "Failed")
ENDED = ("Succeeded", "Failed")
TRAINER_GROUP = "trainer.kubeflow.org"
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z")


class JobSource(Protocol):
    """What the collector needs of a job controller (operator.controller.JobController)."""

    kind: Kind
    resource: Resource

    def cached_job(self, key: str) -> Obj | None:
        """The job as the shared cache holds it. No I/O."""
        ...

    def primary_replica(self, key: str) -> tuple[str, int] | None:
        """(replica type, index) of the job's primary replica, None if the job is not cached
        or not valid. No I/O."""
        ...


@dataclass
class _Followed:
    """One job whose primary pod is followed."""

    key: str
    namespace: str
    pod: str
    pod_uid: str
    container: str | None
    source: JobSource
    period: float
    progress: JobProgress = field(init=False)
    due: float = 0.0
    since: int = 0  # ns since the epoch of the newest line read
    at_since: int = 0  # how many lines of that very time were read
    ended: bool = False
    reads: int = 0


@dataclass(order=True)
class _Due:
    when: float
    key: str = field(compare=False)


class ProgressCollector:
    """Follows the primary pod of every running job of `sources` (by kind). A handler of the
    pods informer (its methods never block) and a thread (`start`)."""

    def __init__(
        self,
        client: KubeClient,
        sources: Mapping[str, JobSource],
        recorder: EventRecorder,
        metrics: OperatorMetrics,
        stop: threading.Event,
        interval: float = WRITE_INTERVAL,
        bucket: TokenBucket | None = None,
    ) -> None:
        self.client, self.sources, self.recorder = client, sources, recorder
        self.metrics, self.stop, self.interval = metrics, stop, interval
        self.bucket = bucket
        # Only the thread touches these.
        self.followed: dict[str, _Followed] = {}  # by job key
        self._by_pod: dict[str, str] = {}  # pod key -> job key
        self._primary: OrderedDict[str, tuple[str, tuple[str, int]]] = OrderedDict()
        self._noticed: dict[str, Obj | None] = {}  # pod key -> newest pod (None: deleted)
        self._heap: list[_Due] = []
        self._cond = threading.Condition()

    # --- the pods informer's events (informer thread) -------------------------------------------
    def on_add(self, obj: Obj) -> None:
        self._notice(obj, obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if _phase(old) != _phase(new) or _uid(old) != _uid(new):
            self._notice(new, new)

    def on_delete(self, obj: Obj) -> None:
        self._notice(obj, None)

    def _notice(self, pod: Obj, newest: Obj | None) -> None:
        ref = controller_ref(pod) or {}
        if str(ref.get("kind", "")) not in self.sources:
            return
        with self._cond:
            self._noticed[object_key(pod)] = newest
            self._cond.notify()

    # --- the thread ---------------------------------------------------------------------------
    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="progress", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._take_noticed()
                for followed in self._due():
                    self._read(followed)
            except Exception:  # progress must never take the operator down
                log.exception("progress collector")
            self._wait()

    def _wait(self) -> None:
        with self._cond:
            if self._noticed or self.stop.is_set():
                return
            timeout = (self._heap[0].when - time.monotonic()) if self._heap else 1.0
            self._cond.wait(min(1.0, max(0.0, timeout)))

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _due(self) -> list[_Followed]:
        now, out = time.monotonic(), []
        while self._heap and self._heap[0].when <= now:
            entry = heapq.heappop(self._heap)
            followed = self.followed.get(entry.key)
            if followed is not None and followed.due == entry.when:  # else superseded
                out.append(followed)
        return out

    def _schedule(self, followed: _Followed, delay: float) -> None:
        followed.due = time.monotonic() + max(0.0, delay)
        heapq.heappush(self._heap, _Due(followed.due, followed.key))

    # --- which pods are followed ----------------------------------------------------------------
    def _take_noticed(self) -> None:
        with self._cond:
            noticed, self._noticed = self._noticed, {}
        for key, pod in noticed.items():
            if pod is None:
                self._pod_gone(key)
            else:
                self._consider(pod)
        self.metrics.progress_followed.set(len(self.followed))

    def _consider(self, pod: Obj) -> None:
        ref = controller_ref(pod) or {}
        source = self.sources[str(ref.get("kind"))]
        namespace = str(pod["metadata"].get("namespace", "default"))
        key = f"{namespace}/{ref.get('name')}"
        seen = observe_pod(pod, source.kind)
        if seen is None or (seen.replica_type, seen.index) != self._primary_of(key, ref, source):
            return
        followed = self.followed.get(key)
        if followed is None or followed.pod_uid != seen.uid:
            if seen.phase not in FOLLOWED or not _recently_running(pod):
                return  # e.g. ended long before this operator started: it read it then
            followed = self._follow(key, namespace, pod, source)
        if seen.phase in ENDED:
            followed.ended = True
            self._schedule(followed, 0.0)  # its last words, and its last write at once

    def _primary_of(self, key: str, ref: Obj, source: JobSource) -> tuple[str, int] | None:
        uid = str(ref.get("uid", ""))
        known = self._primary.get(key)
        if known is not None and known[0] == uid:
            self._primary.move_to_end(key)
            return known[1]
        primary = source.primary_replica(key)
        if primary is not None:
            self._primary[key] = (uid, primary)
            while len(self._primary) > MAX_KNOWN_JOBS:  # the least recently asked go first
                self._primary.popitem(last=False)
        return primary

    def _follow(self, key: str, namespace: str, pod: Obj, source: JobSource) -> _Followed:
        names = {s.get("name") for s in (pod.get("status") or {}).get("containerStatuses") or []}
        container = source.kind.default_container
        followed = _Followed(
            key=key,
            namespace=namespace,
            pod=str(pod["metadata"]["name"]),
            pod_uid=_uid(pod),
            container=container if container in names else None,
            source=source,
            period=self.interval,
        )
        followed.progress = JobProgress(
            lambda status: self._write(followed, status),
            WriteGate(interval=self.interval, written=_written(source, key)),
            on_dropped=lambda reason, detail: self._dropped(followed, reason, detail),
        )
        self._unfollow(key)  # an earlier pod of the same name (re-created)
        self.followed[key] = followed
        self._by_pod[f"{namespace}/{followed.pod}"] = key
        self._schedule(followed, self.interval)
        return followed

    def _pod_gone(self, pod_key: str) -> None:
        key = self._by_pod.get(pod_key)
        if key is not None:
            self._unfollow(key)

    def _unfollow(self, key: str) -> None:
        followed = self.followed.pop(key, None)
        if followed is not None:
            self._by_pod.pop(f"{followed.namespace}/{followed.pod}", None)

    # --- reading and writing --------------------------------------------------------------------
    def _read(self, followed: _Followed) -> None:
        try:
            text = self._get_log(followed)
        except ApiError as exc:
            self.metrics.progress_reads.inc(result="not_found" if exc.not_found else "error")
            if exc.not_found or followed.ended:
                self._unfollow(followed.key)  # the pod is gone: nothing more to read
            else:
                log.info("progress of %s: reading %s: %s", followed.key, followed.pod, exc)
                self._schedule(followed, followed.period)
            return
        self.metrics.progress_reads.inc(result="ok")
        news = _take_lines(followed, text)
        try:
            wait = followed.progress.flush(final=followed.ended)
        except ApiError as exc:
            self.metrics.progress_writes.inc(result="not_found" if exc.not_found else "error")
            log.info("progress of %s: writing: %s", followed.key, exc)
            if exc.not_found:
                self._unfollow(followed.key)
                return
            wait = followed.period
        if followed.ended and wait is None:
            self._unfollow(followed.key)  # read to its end, everything written
            return
        followed.period = self.interval if news else min(2 * followed.period, QUIET_SECONDS)
        self._schedule(followed, max(followed.period, wait or 0.0))

    def _get_log(self, followed: _Followed) -> str:
        query: dict[str, Any] = {
            "timestamps": "true",
            "tailLines": TAIL_LINES,
            "limitBytes": LIMIT_BYTES,
        }
        if followed.container is not None:
            query["container"] = followed.container
        if followed.since:
            query["sinceTime"] = _seconds_text(followed.since)
        self._spare_token()
        followed.reads += 1
        return self.client.get_text(PODS.path(followed.namespace, followed.pod, "log"), query)

    def _write(self, followed: _Followed, status: TrainerStatus) -> None:
        namespace, _, name = followed.key.rpartition("/")
        res = followed.source.resource
        self._spare_token()
        if res.group == TRAINER_GROUP:  # Trainer's own field of a TrainJob
            body: Obj = {"status": {"trainerStatus": status.to_patch()}}
            path = res.path(namespace, name, "status")
            self.client.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        else:
            annotations = {ANNOTATION: encode_annotation(status)}
            self.client.patch(res, namespace, name, {"metadata": {"annotations": annotations}})
        self.metrics.progress_writes.inc(result="ok")

    def _dropped(self, followed: _Followed, reason: str, detail: str) -> None:
        self.metrics.progress_dropped.inc(reason=reason)
        job = followed.source.cached_job(followed.key)
        if job is not None:
            message = dropped_message(reason, detail)
            component = followed.source.kind.controller_name
            self.recorder.record(job, "Warning", "ProgressDropped", message, component)

    def _spare_token(self) -> None:
        if self.bucket is not None:
            self.bucket.wait_spare(self.stop, PATIENCE)


def progress_only(old: Obj, new: Obj) -> bool:
    """Is the change from `old` to `new` only a progress write (the annotation, or a TrainJob's
    `status.trainerStatus`)? Then no reconcile can plan differently. Pure."""
    return _beyond_progress(old) == _beyond_progress(new)


def _beyond_progress(obj: Obj) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != ANNOTATION}
    status = {k: v for k, v in (obj.get("status") or {}).items() if k != "trainerStatus"}
    kept = ("uid", "generation", "labels", "deletionTimestamp", "finalizers", "ownerReferences")
    return (*(meta.get(k) for k in kept), annotations, obj.get("spec"), status)


def _written(source: JobSource, key: str) -> TrainerStatus | None:
    """What the job holds already (after an operator restart: not written again)."""
    job = source.cached_job(key) or {}
    if source.resource.group == TRAINER_GROUP:
        return TrainerStatus.from_wire((job.get("status") or {}).get("trainerStatus"))
    return decode_annotation(((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION))


def _take_lines(followed: _Followed, text: str) -> bool:
    """Feed the lines of a log read that were not read before, told apart by their kubelet
    timestamps (a read from `sinceTime` repeats that second); True if there were any."""
    news, skip = False, followed.at_since
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        when = _nanoseconds(stamp)
        if when is None:  # not the kubelet's format: taken as it is
            followed.progress.tracker.feed(line)
            news = True
            continue
        if when < followed.since:
            continue  # read before
        if when == followed.since and skip > 0:
            skip -= 1  # read before, in the same instant as the newest line then
            continue
        if when > followed.since:
            followed.since, followed.at_since, skip = when, 0, 0
        followed.at_since += 1
        followed.progress.tracker.feed(rest, datetime.fromtimestamp(when / 1e9, timezone.utc))
        news = True
    return news


def _nanoseconds(stamp: str) -> int | None:
    match = _STAMP.fullmatch(stamp)
    if match is None:
        return None
    seconds = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((match.group(2) or "0").ljust(9, "0"))


def _seconds_text(nanoseconds: int) -> str:
    """sinceTime: RFC 3339 in whole seconds (the API's precision), rounded down."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(nanoseconds // 1_000_000_000))


def _recently_running(pod: Obj) -> bool:
    """Running, or ended less than QUIET_SECONDS ago (its containers' finishedAt): a pod first
    seen when it already ended long ago was read by the operator that saw it end."""
    if _phase(pod) not in ENDED:
        return True
    ends = [
        _nanoseconds(str(((s.get("state") or {}).get("terminated") or {}).get("finishedAt", "")))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [end for end in ends if end is not None]
    return not known or time.time() - max(known) / 1e9 < QUIET_SECONDS


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))
