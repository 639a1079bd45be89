"""Helpers for the local-backend tests: replica commands and scans for processes a test left.

Replicas are found by a tag in their environment (the test sets it; replicas inherit it).
Supervisors are found by their working directory, which is their job's directory under the
test's TRAINOP_HOME (a supervisor forked from pytest does not show pytest's later env changes in
/proc/<pid>/environ)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import processes
from processes import supervisors

__all__ = ["TAG", "leftovers", "py", "supervisors", "tagged_processes"]

TAG = "TRAINOP_TEST_TAG"


def py(code: str) -> list[str]:
    """A replica command: the interpreter trainop puts first on PATH, running `code`."""
    return ["python", "-c", textwrap.dedent(code)]


def tagged_processes(tag: str) -> list[int]:
    """Pids of live replicas whose environment carries `tag` (not the test home's supervisors)."""
    home = os.environ.get("TRAINOP_HOME")
    return processes.tagged_processes(TAG, tag, Path(home) if home else None)


def leftovers(tag: str, home: Path, timeout: float = 10.0) -> list[int]:
    """Replicas and supervisors still alive after up to `timeout` seconds (expected: none)."""
    return processes.leftovers(TAG, tag, home, timeout)
