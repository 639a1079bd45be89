"""Reading replicas' log files: all at once, or following them while the job runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from trainop_core.backends.base import LogLine
from trainop_core.backends.local.state import JobDir, read_json
from trainop_core.backends.local.status import is_finished
from trainop_core.errors import NotFoundError

FOLLOW_POLL_SECONDS = 0.1


def replica_order(job_dir: JobDir, only: str | None = None) -> list[str]:
    """The job's replica ids in the order they were allocated (the kind's replica order), or
    just `only`; NotFoundError names the replicas there are."""
    replicas = list(read_json(job_dir.local_file)["ports"])
    if only is None:
        return replicas
    if only not in replicas:
        known = ", ".join(replicas)
        raise NotFoundError(f"job {job_dir.key} has no replica {only!r} (replicas: {known})")
    return [only]


@dataclass
class _Tail:
    """The unread rest of one log file."""

    replica: str
    job_dir: JobDir
    offset: int = 0
    partial: bytes = field(default=b"")

    def read(self, final: bool = False) -> list[LogLine]:
        try:
            with self.job_dir.log_file(self.replica).open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        if final and self.partial:
            lines, self.partial = [*lines, self.partial], b""
        return [LogLine(self.replica, line.decode(errors="replace")) for line in lines]


def read_logs(job_dir: JobDir, replicas: list[str]) -> Iterator[LogLine]:
    for replica in replicas:
        yield from _Tail(replica, job_dir).read(final=True)


def follow_logs(job_dir: JobDir, replicas: list[str]) -> Iterator[LogLine]:
    """Lines from every replica as they are written, until the job has finished and none of its
    replicas runs any more (or it was deleted), and everything they wrote has been yielded.

    A replica left running after the job finished (cleanPodPolicy None, e.g. a parameter
    server) keeps the stream open until it stops or the job is deleted."""
    tails = [_Tail(replica, job_dir) for replica in replicas]
    while True:
        finished = _finished_or_gone(job_dir)  # checked first: the last read then sees everything
        for tail in tails:
            yield from tail.read(final=finished)
        if finished:
            return
        time.sleep(FOLLOW_POLL_SECONDS)


def _finished_or_gone(job_dir: JobDir) -> bool:
    try:
        finished = is_finished(job_dir.read_job().get("status") or {})
        return finished and not (job_dir.supervisor_alive() and _replicas_running(job_dir))
    except (NotFoundError, ValueError):
        return True


def _replicas_running(job_dir: JobDir) -> bool:
    try:
        records = read_json(job_dir.pods_file)
    except (OSError, ValueError):
        return False
    return any(record.get("phase") in ("Pending", "Running") for record in records)
