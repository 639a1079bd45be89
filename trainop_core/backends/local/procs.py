"""This machine's process table (/proc): sessions, children, environment markers, and killing.

A replica's processes are found three ways, because each can be escaped alone:

- its session (every replica starts one): what stayed in it, the usual case;
- environment markers: every replica's environment carries `TRAINOP_JOB_DIR` (its job) and
  `TRAINOP_POD_UID` (its pod), which its descendants inherit even after `setsid()` and a double
  fork. /proc shows the environment a process was started with, so only a process that exec'd
  with a new environment loses them;
- the watcher (see `supervisor.watch`): a child subreaper above the supervisor adopts every
  orphaned descendant, marked or not, and kills them all when the supervisor ends, however it
  ends (SIGKILL included).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOB_MARKER = "TRAINOP_JOB_DIR"
POD_MARKER = "TRAINOP_POD_UID"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LIBC: Any = None
with contextlib.suppress(OSError):
    _LIBC = ctypes.CDLL(None, use_errno=True)


def set_child_subreaper() -> bool:
    """Make orphaned descendants of this process its children instead of init's (Linux)."""
    return _LIBC is not None and _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, sig)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    session: int
    started: int  # clock ticks since boot: with the pid, it names one process


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def proc(pid: int) -> Proc | None:
    fields = _stat(pid)  # after ")": state ppid pgrp session ... (starttime is the 20th)
    if not fields or fields[0] == "Z":
        return None
    return Proc(pid, int(fields[1]), int(fields[3]), int(fields[19]))


def processes() -> Iterator[Proc]:
    """Every live (not zombie) process but this one."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and (found := proc(int(entry.name))):
            yield found


def started_at(pid: int) -> int | None:
    found = proc(pid)
    return found.started if found else None


def session_of(pid: int) -> int | None:
    found = proc(pid)
    return found.session if found else None


def has_marker(pid: int, variable: str, value: str) -> bool:
    """Whether the process started with `variable=value` in its environment."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's
        return False
    return f"{variable}={value}".encode() in environ.split(b"\0")


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_matching(match: Callable[[Proc], bool], *, rounds: int = 20) -> int:
    """SIGKILL every process `match` selects, again until a scan finds none (a process killed
    mid-fork may leave a child that matches too). Returns how many were signalled."""
    killed = 0
    for _ in range(rounds):
        found = [p.pid for p in processes() if match(p)]
        if not found:
            break
        killed += sum(_kill(pid) for pid in found)
        time.sleep(0.01)
    return killed


def kill_session(sid: int, leader_started: int | None = None) -> int:
    """SIGKILL every process of session `sid`: each replica runs in a session of its own.

    A session id cannot be reused while any member lives; once all are gone, a new session
    leader may get that number: if a leader with this pid exists but started at another time
    than `leader_started`, the session is someone else's and is left alone."""
    now_started = started_at(sid)
    if leader_started is not None and now_started is not None and now_started != leader_started:
        return 0
    return kill_matching(lambda p: p.session == sid, rounds=1)


def kill_marked(variable: str, value: str, *, since: int | None = None) -> int:
    """SIGKILL every process started with `variable=value`, whatever session it moved to.
    `since` (a start time, see `Proc.started`) skips older processes: a replica's descendants
    all started after it, and reading a start time is cheaper than reading an environment."""
    oldest = since or 0
    return kill_matching(lambda p: p.started >= oldest and has_marker(p.pid, variable, value))


def kill_children() -> None:
    """SIGKILL every child of this process and reap it; a child subreaper adopts the children of
    each one it kills, so repeat until there is no child left."""
    me = os.getpid()
    while True:
        for child in [p.pid for p in processes() if p.ppid == me]:
            _kill(child)
        try:
            os.wait()
        except ChildProcessError:
            return
