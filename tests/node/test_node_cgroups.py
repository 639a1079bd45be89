"""Process nodes of several clusters on one machine share a parent cgroup (the root of the cpu
hierarchy, often): each keeps to a directory named by its pid, and only a dead owner's is
cleaned up, with what runs in it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainop_core.node import cgroups

pytestmark = pytest.mark.skipif(not cgroups.usable(), reason=cgroups.why_not())
NOT_A_PID = 4_194_305  # above Linux's largest pid: no process can have it


@pytest.fixture
def parent() -> Path:
    """Where this process's nodes put their directories (the first hierarchy)."""
    found = cgroups.detect("probe")
    assert found is not None
    cgroups.delete_base(found)
    return found.bases[0].parent


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait(10)


def node_dir_with_a_process(
    parent: Path, owner: int, sleepers: list[subprocess.Popen[bytes]]
) -> tuple[Path, subprocess.Popen[bytes]]:
    base = parent / f"{cgroups.LEAF_PREFIX}{owner}.node-0"
    container = base / "pod-uid" / "main"
    container.mkdir(parents=True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sleepers.append(process)
    (container / "cgroup.procs").write_text(str(process.pid))
    return base, process


def test_a_dead_nodes_directory_is_removed_with_its_processes_and_a_live_ones_kept(
    parent: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    dead, orphan = node_dir_with_a_process(parent, NOT_A_PID, sleepers)
    live, running = node_dir_with_a_process(parent, os.getpid(), sleepers)
    try:
        removed = cgroups.remove_stale(parent)

        assert removed == [dead] and not dead.exists()
        assert orphan.wait(10) == -9  # SIGKILLed with its directory
        assert live.is_dir() and running.poll() is None  # another cluster's node: untouched
    finally:
        cgroups.delete_base(cgroups.Cgroups((live,), v2=False))


def test_nodes_of_one_name_in_two_processes_get_two_directories() -> None:
    found = cgroups.detect("node-0")
    assert found is not None
    try:
        (base, *_) = found.bases
        assert base.name == f"{cgroups.LEAF_PREFIX}{os.getpid()}.node-0"
    finally:
        cgroups.delete_base(found)
