"""Helpers for the local-backend tests: replica commands and scans for processes a test left.

Replicas are found by a tag in their environment (the test sets it; replicas inherit it).
Supervisors are found by their working directory, which is their job's directory under the
test's TRAINOP_HOME (a supervisor forked from pytest does not show pytest's later env changes in
/proc/<pid>/environ)."""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

TAG = "TRAINOP_TEST_TAG"


def py(code: str) -> list[str]:
    """A replica command: the interpreter trainop puts first on PATH, running `code`."""
    return ["python", "-c", textwrap.dedent(code)]


def _live(match: Callable[[Path], bool]) -> list[int]:
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


def tagged_processes(tag: str) -> list[int]:
    """Pids of live processes whose environment carries `tag`: the test's replicas."""
    marker = f"{TAG}={tag}".encode()
    return _live(lambda entry: marker in (entry / "environ").read_bytes().split(b"\0"))


def supervisors(home: Path) -> list[int]:
    """Pids of live supervisors of jobs under `home`."""
    prefix = str(home)
    return _live(lambda entry: os.readlink(entry / "cwd").startswith(prefix))


def leftovers(tag: str, home: Path, timeout: float = 10.0) -> list[int]:
    """Replicas and supervisors still alive after `timeout` seconds (expected: none)."""
    deadline = time.monotonic() + timeout
    while (left := tagged_processes(tag) + supervisors(home)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
