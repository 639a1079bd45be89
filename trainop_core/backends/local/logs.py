"""Reading replicas' log files: all at once, or following them while the job runs.

Constant memory whatever the log's size: files are read in chunks, and a line longer than
`MAX_LINE_BYTES` (a progress bar that never prints a newline) is handed out in pieces. A follower
opens every log file at once and keeps it open, so it can print everything a replica wrote even
when the job is deleted under it (by `trainop delete` or its TTL).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO

from trainop_core.backends.base import LogLine
from trainop_core.backends.local.state import JobDir
from trainop_core.backends.local.status import is_finished
from trainop_core.errors import DamagedJobError, NotFoundError

FOLLOW_POLL_SECONDS = 0.1
CHUNK_BYTES = 64 * 1024
MAX_LINE_BYTES = 256 * 1024

Hold = Callable[[], AbstractContextManager[None]]


def replica_order(job_dir: JobDir, only: str | None = None) -> list[str]:
    """The job's replica ids in the order they were allocated (the kind's replica order), or
    just `only`; NotFoundError names the replicas there are. With local.json damaged, the log
    files that exist say which replicas there were."""
    try:
        replicas = list(job_dir.read_local()["ports"])
    except DamagedJobError:
        replicas = sorted(p.stem for p in job_dir.logs_dir.glob("*.log") if _is_replica(p.stem))
        if not replicas:
            raise
    if only is None:
        return replicas
    if only not in replicas:
        known = ", ".join(replicas)
        raise NotFoundError(f"job {job_dir.key} has no replica {only!r} (replicas: {known})")
    return [only]


def _is_replica(name: str) -> bool:
    from trainop_core.api.names import is_replica

    return is_replica(name)


class LogTail:
    """The unread rest of one log file, through a descriptor kept open once the file exists;
    with `lines`, from the start of its last `lines` lines when it is first opened."""

    def __init__(self, replica: str, job_dir: JobDir, lines: int | None = None) -> None:
        self.replica = replica
        self.job_dir = job_dir
        self.handle: IO[bytes] | None = None
        self.partial = b""
        self.lines = lines
        self.open()

    def open(self) -> None:
        if self.handle is None:
            with contextlib.suppress(FileNotFoundError):
                self.handle = self.job_dir.log_file(self.replica).open("rb")
                if self.lines is not None:
                    self.handle.seek(tail_offset(self.handle, self.lines))

    def read(self, final: bool = False) -> Iterator[LogLine]:
        """Every complete line written since the last read (and, if `final`, the unterminated
        rest), reading at most CHUNK_BYTES at a time."""
        self.open()
        while self.handle is not None and (chunk := self.handle.read(CHUNK_BYTES)):
            yield from self._lines(chunk)
        if final and self.partial:
            yield self._line(self.partial)
            self.partial = b""

    def catch_up(self, most: int, keep: int) -> int:
        """If more than `most` bytes wait unread, skip all but the last `keep` (and the line cut
        there): a reader that only wants the newest output stays bounded under a flood.
        Returns the bytes skipped."""
        self.open()
        if self.handle is None:
            return 0
        position, size = self.handle.tell(), os.fstat(self.handle.fileno()).st_size
        if size - position <= most:
            return 0
        self.handle.seek(size - keep)
        self.handle.readline(MAX_LINE_BYTES)  # the rest of a line cut by the seek
        self.partial = b""
        return self.handle.tell() - position

    def _lines(self, chunk: bytes) -> Iterator[LogLine]:
        *lines, rest = (self.partial + chunk).split(b"\n")
        for line in lines:
            yield self._line(line)
        while len(rest) > MAX_LINE_BYTES:
            piece, rest = rest[:MAX_LINE_BYTES], rest[MAX_LINE_BYTES:]
            yield self._line(piece)
        self.partial = rest

    def _line(self, data: bytes) -> LogLine:
        return LogLine(self.replica, data.decode(errors="replace"))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def tail_offset(handle: IO[bytes], lines: int) -> int:
    """Where the last `lines` lines of an open file begin, found by reading backwards from its
    end, at most `lines` x MAX_LINE_BYTES (a longer line is handed out in pieces anyway): what
    comes before is never read."""
    end = handle.seek(0, os.SEEK_END)
    floor = max(0, end - lines * MAX_LINE_BYTES)
    if lines == 0 or end == 0:
        return end
    handle.seek(end - 1)
    pos = end - 1 if handle.read(1) == b"\n" else end  # that newline ends the last line
    found = 0
    while pos > floor:
        size = min(CHUNK_BYTES, pos - floor)
        handle.seek(pos - size)
        chunk = handle.read(size)
        at = len(chunk)
        while (at := chunk.rfind(b"\n", 0, at)) != -1:
            found += 1
            if found == lines:
                return pos - size + at + 1
        pos -= size
    return floor


def read_logs(job_dir: JobDir, replicas: list[str], tail: int | None = None) -> Iterator[LogLine]:
    for replica in replicas:
        tail_ = LogTail(replica, job_dir, tail)
        try:
            yield from tail_.read(final=True)
        finally:
            tail_.close()


class LogFollower:
    """Lines from every replica as they are written, until the job has finished and none of its
    replicas runs any more (or it was deleted), and everything they wrote has been yielded.

    Built eagerly: when the constructor returns, every log file is open and `hold` (the
    backend's follow lease: a TTL deletion waits for it) is held; it is let go as soon as the job
    is seen finished. A replica left running after the job finished (cleanPodPolicy None, e.g.
    a parameter server) keeps the stream open until it stops or the job is deleted."""

    def __init__(
        self,
        job_dir: JobDir,
        replicas: list[str],
        hold: Hold = contextlib.nullcontext,
        tail: int | None = None,
    ) -> None:
        self.job_dir = job_dir
        self._hold: AbstractContextManager[None] | None = hold()
        self._hold.__enter__()
        self.tails = [LogTail(replica, job_dir, tail) for replica in replicas]
        self._lines = self._follow()

    def __iter__(self) -> Iterator[LogLine]:
        return self

    def __next__(self) -> LogLine:
        return next(self._lines)

    def _follow(self) -> Iterator[LogLine]:
        try:
            while not _is_finished(self.job_dir):
                for tail in self.tails:
                    yield from tail.read()
                time.sleep(FOLLOW_POLL_SECONDS)
            self._let_go()
            while True:
                done = _finished_or_gone(self.job_dir)  # checked first: the last read sees all
                for tail in self.tails:
                    yield from tail.read(final=done)
                if done:
                    return
                time.sleep(FOLLOW_POLL_SECONDS)
        finally:
            self.close()

    def _let_go(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.__exit__(None, None, None)

    def close(self) -> None:
        """Let go of the lease and the files (also when the follower is dropped unread)."""
        self._let_go()
        for tail in self.tails:
            tail.close()

    def __del__(self) -> None:
        self.close()


def follow_logs(
    job_dir: JobDir,
    replicas: list[str],
    hold: Hold = contextlib.nullcontext,
    tail: int | None = None,
) -> LogFollower:
    return LogFollower(job_dir, replicas, hold, tail)


def _is_finished(job_dir: JobDir) -> bool:
    try:
        return is_finished(job_dir.read_job().get("status") or {})
    except (NotFoundError, DamagedJobError):
        return True


def _finished_or_gone(job_dir: JobDir) -> bool:
    return _is_finished(job_dir) and not (job_dir.supervisor_alive() and _replicas_running(job_dir))


def _replicas_running(job_dir: JobDir) -> bool:
    from trainop_core.backends.local.state import read_json

    try:
        records = read_json(job_dir.pods_file)
    except (OSError, ValueError):
        return False
    return isinstance(records, list) and any(
        isinstance(record, dict) and record.get("phase") in ("Pending", "Running")
        for record in records
    )
