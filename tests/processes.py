"""Scans of /proc for processes a test left behind (replicas and local supervisors).

Replicas are found by a tag in their environment (the test sets `<variable>=<tag>` in the job's
env; replicas inherit it). Supervisors are found by their working directory, which is their
job's directory under the test's TRAINOP_HOME (a supervisor forked from pytest does not show
pytest's later env changes in /proc/<pid>/environ).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def live(match: Callable[[Path], bool]) -> list[int]:
    """Pids of live (not zombie) processes other than this one for which `match` holds."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and match(entry):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def tagged_processes(variable: str, tag: str, home: Path | None = None) -> list[int]:
    """Pids of live processes whose environment has `variable=tag`: the test's replicas.

    A supervisor started as a fresh interpreter (from a multi-threaded caller) inherits the tag
    too; with `home`, the supervisors of jobs under it are left out.
    """
    marker = f"{variable}={tag}".encode()
    tagged = live(lambda entry: marker in (entry / "environ").read_bytes().split(b"\0"))
    excluded = set(supervisors(home)) if home is not None else set()
    return [pid for pid in tagged if pid not in excluded]


def supervisors(home: Path) -> list[int]:
    """Pids of live supervisors of jobs under `home`."""
    prefix = str(home)
    return live(lambda entry: os.readlink(entry / "cwd").startswith(prefix))


def leftovers(variable: str, tag: str, home: Path, timeout: float = 10.0) -> list[int]:
    """Replicas and supervisors still alive after up to `timeout` seconds (expected: none)."""
    deadline = time.monotonic() + timeout
    while (
        left := tagged_processes(variable, tag, home) + supervisors(home)
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
