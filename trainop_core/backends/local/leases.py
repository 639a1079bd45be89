"""Holding a finished job back from its TTL deletion until its follower has seen the end.

`ttlSecondsAfterFinished: 0` deletes a job the moment it finishes; `trainop run` must still see
how it ended. Two lock files in the job directory say that someone is looking:

- `follow.lease`: every follower (`logs -f`, `wait`) holds it shared until it has seen the job
  finished; the supervisor postpones a TTL deletion while anyone does;
- `create.lease`: the creating process holds it shared from before the supervisor starts until
  it follows the job itself, which closes the gap between `create` returning and the follower
  starting. A creator that never follows holds up the deletion by `CREATE_GRACE_SECONDS` at most.

fcntl locks vanish with their process, so a follower that dies holds nothing up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

CREATE_GRACE_SECONDS = 5.0


class _HasLease(Protocol):
    @property
    def create_lease(self) -> Path: ...


def _open_shared(path: Path, *, wait: bool = True) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # a job from before leases existed, or gone: nothing to hold
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def hold_shared(path: Path) -> Iterator[None]:
    """Hold a shared lock on `path` for the block (nothing if it cannot be opened)."""
    fd = _open_shared(path)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def is_held(path: Path) -> bool:
    """Whether anyone holds a lock on `path` (probed without blocking; creates nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class Leases:
    """The creator's holds, one descriptor per job it created, dropped when it follows the job
    or, lazily, once the supervisor would ignore them anyway."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def take(self, job_dir: _HasLease) -> None:
        self._expire()
        fd = _open_shared(job_dir.create_lease, wait=False)
        if fd is not None:
            with self._lock:
                self._held[str(job_dir.create_lease)] = (fd, time.monotonic())

    def release(self, job_dir: _HasLease) -> None:
        with self._lock:
            held = self._held.pop(str(job_dir.create_lease), None)
        if held is not None:
            os.close(held[0])

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [k for k, (_, t) in self._held.items() if now - t > CREATE_GRACE_SECONDS]
            closing = [self._held.pop(k)[0] for k in old]
        for fd in closing:
            os.close(fd)

    def __del__(self) -> None:
        for fd, _ in self._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
