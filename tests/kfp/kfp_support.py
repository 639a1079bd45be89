"""Helpers of the KFP tests: jobs that run real replica processes in seconds, and a way to find
every process a test started (each carries TAG=<uuid> in its environment)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from builders import make_job

TAG = "TRAINOP_KFP_TEST_TAG"
TRAIN_SCRIPT = Path(__file__).resolve().parent / "allreduce_train.py"


def allreduce_job(name: str, workers: int = 2, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """PyTorchJob, 1 Master + `workers` Workers doing gloo all_reduces; the Master prints
    `loss=... step=N` per step and `world_size=... accuracy=...` at the end."""
    command = [sys.executable, str(TRAIN_SCRIPT), *args]
    builder = make_job("PyTorchJob", name).master(command=command)
    return builder.workers(workers, command=command).build()


def python_job(name: str, code: str, workers: int = 1) -> dict[str, Any]:
    """PyTorchJob whose replicas run `code` (Never restarted: a failure fails the job)."""
    command = [sys.executable, "-c", code]
    builder = make_job("PyTorchJob", name)
    builder.master(command=command, restart_policy="Never")
    return builder.workers(workers, command=command, restart_policy="Never").build()


def tagged_processes(tag: str, *, cmdline: str = "", program: str = "") -> list[int]:
    """Pids of live processes whose environment carries `tag` (and whose command line contains
    `cmdline`, and whose program, argv[0], contains `program`)."""
    marker = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if (
            marker in environ.split(b"\0")
            and state != "Z"
            and cmdline in " ".join(argv)
            and program in Path(argv[0]).name
        ):
            found.append(int(entry.name))
    return found


def wait_until_no_processes(tag: str, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def parent(pid: int) -> int:
    """The parent pid of `pid`, 0 if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
