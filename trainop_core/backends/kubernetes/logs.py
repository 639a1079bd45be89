"""Replica logs, each line tagged with its replica (`worker-1`), read through the pods' `log`.

Following streams every started pod at once (one thread per pod, all feeding one queue); the
API server ends a `follow=true` stream when the container terminates. New pods (restarts, late
starters) are picked up until the job has finished and every stream has ended.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Generator, Iterator

from trainop_core.api.job import TrainingJob
from trainop_core.backends.base import LogLine
from trainop_core.backends.kubernetes.jobs import JobStore
from trainop_core.backends.kubernetes.pods import Pods, ReplicaPod
from trainop_core.backends.kubernetes.wait import is_finished
from trainop_core.errors import NotFoundError
from trainop_core.kinds.base import Kind
from trainop_core.replicas import replica_ids

POLL_SECONDS = 0.5
QUEUED_LINES = 1000  # pumps wait when the reader is slower: memory stays bounded
_Item = LogLine | BaseException | None  # a line, a pump's failure, or "this pump is done"


def check_replica(job: TrainingJob, kind: Kind, replica: str | None) -> None:
    known = replica_ids(job, kind)
    if replica is not None and replica.lower() not in known:
        raise NotFoundError(
            f"job {job.key} has no replica {replica!r} (replicas: {', '.join(known)})"
        )


def _selected(pods: list[ReplicaPod], replica: str | None) -> list[ReplicaPod]:
    return [p for p in pods if replica is None or p.tag == replica.lower()]


def read_logs(
    pods: Pods, kind: Kind, job: TrainingJob, replica: str | None, tail: int | None = None
) -> Iterator[LogLine]:
    """What the job's started pods have written so far (the last `tail` lines of each), one
    replica after the other."""
    check_replica(job, kind, replica)
    for pod in _selected(pods.of_job(kind, job.namespace, job.name), replica):
        if not pod.started:
            continue
        try:
            for text in pods.read_log(job.namespace, pod, tail):
                yield LogLine(pod.tag, text)
        except NotFoundError:  # deleted since listed
            continue


def follow_logs(
    jobs: JobStore,
    pods: Pods,
    kind: Kind,
    job: TrainingJob,
    replica: str | None,
    tail: int | None = None,
) -> Iterator[LogLine]:
    """Lines from every selected replica as they are written, until the job has finished and
    every stream has ended (the pods already started: from their last `tail` lines). NotFoundError
    if the job is deleted meanwhile."""
    check_replica(job, kind, replica)
    lines: queue.Queue[_Item] = queue.Queue(maxsize=QUEUED_LINES)
    stop = threading.Event()  # the reader went away: pumps must not wait on a full queue
    seen: set[str] = set()  # pod uids already streamed (a restarted pod has a new uid)
    pumping = 0
    try:
        while True:
            finished = is_finished(jobs.get(kind, job.namespace, job.name))
            for pod in _selected(pods.of_job(kind, job.namespace, job.name), replica):
                if pod.started and pod.uid not in seen:
                    seen.add(pod.uid)
                    pumping += 1
                    _start_pump(pods, job.namespace, pod, lines, stop, tail)
            tail = None  # pods that start later are read from their start
            if finished and not pumping:
                return
            pumping -= yield from _drain(lines, POLL_SECONDS)
    finally:
        stop.set()


def _drain(lines: queue.Queue[_Item], seconds: float) -> Generator[LogLine, None, int]:
    """Yield what the pumps queue for `seconds`; return how many pumps finished meanwhile."""
    done = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            item = lines.get(timeout=left)
        except queue.Empty:
            break
        if item is None:
            done += 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield item
    return done


def _start_pump(
    pods: Pods,
    namespace: str,
    pod: ReplicaPod,
    out: queue.Queue[_Item],
    stop: threading.Event,
    tail: int | None,
) -> None:
    def put(item: _Item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:  # the reader is slower: wait for it (bounded memory)
                continue
        return False

    def pump() -> None:
        try:
            for text in pods.stream_log(namespace, pod, tail):
                if not put(LogLine(pod.tag, text)):
                    return
        except NotFoundError:  # the pod went away: nothing more to read from it
            pass
        except BaseException as exc:  # re-raised in the consuming thread
            put(exc)
        finally:
            put(None)

    threading.Thread(target=pump, daemon=True, name=f"logs-{pod.pod}").start()
