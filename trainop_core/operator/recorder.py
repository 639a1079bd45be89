"""Records core/v1 Events on a job, asynchronously and correlated, as client-go's recorder does.

`record()` never blocks a reconcile and does no I/O: it notes the event, and one daemon thread
writes. What reaches the server follows client-go's EventCorrelator:

* an event identical to one recorded before (same object, type, reason, message and component)
  is no new Event: the existing one's ``count`` goes up (a PATCH of count, message and
  lastTimestamp), which ``kubectl describe`` shows as "x3". The planner repeats some events on
  every reconcile (ExitedWithCode, as upstream does), so this matters;
* similar events (same object, type, reason and component) with ten different messages within ten
  minutes are combined: the tenth and later ones become one Event whose message starts
  "(combined from similar events): " and whose count goes up;
* and, beyond client-go, occurrences recorded while the write for the same Event is still queued
  are folded into that write: a burst costs one request per distinct Event, not per occurrence.

What it remembers is bounded (client-go's LRU of 4,096), and `forget` drops a deleted job's part at
once: without it, every deleted job left its events in the cache until the LRU pushed them out, 11
KiB of traced memory per job (benchmarks/operator_memory.py).

Writes go through their own client but take their tokens from the operator's bucket (`bucket`):
as upstream's, ``--kube-api-qps`` bounds every request the process makes. An event takes a token
only when one is spare until it has waited `patience` seconds (30), then it queues for one like
any request: while the limit holds the operator back, reconciles go first and events wait, and an
event is written at most about `patience` seconds late unless the process is limited throughout.
A full queue drops the event (logged); a failed write is logged: events are best effort, never a
reason to fail or retry a reconcile.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from trainop_core.api.types import format_time, utc_now
from trainop_core.operator.kube import EVENTS, ApiError, KubeClient, Obj
from trainop_core.operator.ratelimit import Clock, TokenBucket

log = logging.getLogger(__name__)
# One operator records for every kind, so a burst of N jobs queues ~13 N distinct events within
# seconds: client-go's queue of 1,000 dropped more than half of them at 400 jobs. An event is
# about 1 KiB, so this bounds the backlog at ~10 MiB.
QUEUE_SIZE = 10_000
CACHE_SIZE = 4096  # client-go's LRU of correlated events
SIMILAR_LIMIT = 10  # client-go: distinct messages before similar events are combined
SIMILAR_INTERVAL = 600.0  # seconds
COMBINED = "(combined from similar events): "
PATIENCE = 30.0  # seconds an event waits for a spare token before queueing for one

Key = tuple[str, ...]


@dataclass
class _Entry:
    """One Event as the server has it (`name`, `count`) plus occurrences not yet written."""

    event: Obj
    name: str = ""  # "" until created
    count: int = 0  # the count the server holds
    unwritten: int = 0
    queued_at: float = 0.0
    busy: bool = False  # queued or being written


@dataclass
class _Similar:
    messages: set[str] = field(default_factory=set)
    since: float = 0.0


class EventRecorder:
    """Writes Events whose `source.component` is the recording controller's name."""

    def __init__(
        self,
        client: KubeClient,
        queue_size: int = QUEUE_SIZE,
        bucket: TokenBucket | None = None,
        patience: float = PATIENCE,
        clock: Clock = time.monotonic,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.client = client
        self.queue_size = queue_size
        self.cache_size = cache_size
        self.bucket = bucket
        self.patience = patience
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[Key] = deque()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._similar: OrderedDict[Key, _Similar] = OrderedDict()
        # (namespace, name) -> its keys in both maps, for `forget`
        self._by_object: dict[tuple[str, str], set[Key]] = {}
        self._stopping = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def record(self, job: Obj, type_: str, reason: str, message: str, component: str) -> None:
        """Note an event about `job` (no I/O here)."""
        event = _event(job, type_, reason, message, component)
        with self._cond:
            key = self._correlate(event)
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(event)
                self._index(key)
            else:
                entry.event.update(message=event["message"], lastTimestamp=event["lastTimestamp"])
                self._entries.move_to_end(key)
            entry.unwritten += 1
            if not entry.busy:
                if len(self._queue) >= self.queue_size:
                    entry.unwritten -= 1
                    log.warning("event queue full: dropping %s on %s", reason, _name(job))
                    return
                self._enqueue(key, entry)
            self._evict()

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered of the events on object `namespace/name` (it was deleted),
        but for those still queued or being written: the LRU removes them later. No I/O."""
        with self._cond:
            for key in self._by_object.pop((namespace, name), set()):
                entry = self._entries.get(key)
                if entry is not None and entry.busy:
                    self._index(key)
                    continue
                self._entries.pop(key, None)
                self._similar.pop(key, None)

    def stop(self, timeout: float = 2.0) -> None:
        """Write what is queued (for up to `timeout` seconds, without waiting for spare
        tokens), then stop."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # --- correlation (under the lock) ----------------------------------------------------------
    def _correlate(self, event: Obj) -> Key:
        """The key `event` is counted under; combines it with similar ones past the limit."""
        obj, source = event["involvedObject"], event["source"]["component"]
        similar_key = (obj["namespace"], obj["uid"], obj["kind"], obj["name"], event["type"],
                       event["reason"], source)  # fmt: skip
        now = self._clock()
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.since > SIMILAR_INTERVAL:
            similar = self._similar[similar_key] = _Similar(since=now)
            self._index(similar_key)
        self._similar.move_to_end(similar_key)
        while len(self._similar) > self.cache_size:
            self._unindex(self._similar.popitem(last=False)[0])
        similar.messages.add(event["message"])
        if len(similar.messages) < SIMILAR_LIMIT:
            return (*similar_key, event["message"])
        event["message"] = COMBINED + event["message"]
        return (*similar_key, COMBINED)

    def _enqueue(self, key: Key, entry: _Entry) -> None:
        entry.busy, entry.queued_at = True, self._clock()
        self._queue.append(key)
        self._cond.notify()

    def _evict(self) -> None:
        """Forget the least recently recorded Events beyond the cache size (never a busy one)."""
        excess = len(self._entries) - self.cache_size
        if excess <= 0:
            return
        for key in list(itertools.islice(self._entries, excess)):
            if not self._entries[key].busy:
                del self._entries[key]
                self._unindex(key)

    def _index(self, key: Key) -> None:
        self._by_object.setdefault((key[0], key[3]), set()).add(key)

    def _unindex(self, key: Key) -> None:
        keys = self._by_object.get((key[0], key[3]))
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_object[(key[0], key[3])]

    # --- the writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while (work := self._next()) is not None:
            key, entry, occurrences = work
            self._take_token(entry)
            name, count = self._write(entry, occurrences)
            with self._cond:
                entry.name, entry.count = name, count
                entry.busy = False
                if entry.unwritten:  # recorded again while it was being written
                    self._enqueue(key, entry)

    def _next(self) -> tuple[Key, _Entry, int] | None:
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            key = self._queue.popleft()
            entry = self._entries[key]
            occurrences, entry.unwritten = entry.unwritten, 0
            return key, entry, occurrences

    def _take_token(self, entry: _Entry) -> None:
        if self.bucket is None:
            return
        waited = self._clock() - entry.queued_at
        patience = 0.0 if self._stopping else max(0.0, self.patience - waited)
        self.bucket.wait_spare(self.client.stop, patience)

    def _write(self, entry: _Entry, occurrences: int) -> tuple[str, int]:
        """Create the Event, or raise the count of the one written before; (name, count)."""
        event, count = entry.event, entry.count + occurrences
        namespace = event["metadata"]["namespace"]
        try:
            if entry.name:
                patch = {k: event[k] for k in ("message", "lastTimestamp")}
                try:
                    self.client.patch(EVENTS, namespace, entry.name, {**patch, "count": count})
                    return entry.name, count
                except ApiError as exc:
                    if not exc.not_found:  # expired or deleted: write it anew, as client-go
                        raise
            name = f"{event['involvedObject']['name']}.{time.time_ns():x}"
            body = {**event, "count": count, "metadata": {"name": name, "namespace": namespace}}
            try:
                self.client.create(EVENTS, namespace, body)
            except ApiError as exc:
                if not exc.answer_lost:
                    raise
                # Perhaps written: the next occurrence patches it, and creates it if it is not.
            return name, count
        except ApiError as exc:
            log.info("event %s on %s not recorded: %s", event["reason"], _name(event), exc)
            return entry.name, entry.count


def _event(job: Obj, type_: str, reason: str, message: str, component: str) -> Obj:
    meta, now = job.get("metadata", {}), format_time(utc_now())
    namespace = str(meta.get("namespace", "default"))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace},
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


def _name(obj: Obj) -> str:
    involved = obj.get("involvedObject")
    meta = involved if isinstance(involved, dict) else obj.get("metadata", {})
    return str(meta.get("name", ""))
