"""Helpers for the HPO tests: job templates around examples/hpo/quadratic.py, the loss formula
the script prints, and scans for processes a test left behind.

Every replica a test starts carries `HPO_TEST_TAG=<tag>` in its container env, so a scan of
/proc finds exactly that test's replicas; supervisors are found by their working directory (the
job's directory under the test's TRAINOP_HOME).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builders import make_job

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "hpo" / "quadratic.py"
TAG = "HPO_TEST_TAG"


def quadratic_loss(lr: float, step: int) -> float:
    """What quadratic.py prints at `step` (the tests derive expectations from it)."""
    return (lr - 0.01) ** 2 + 1e-3 / step


def quadratic_template(
    tag: str,
    *,
    kind: str = "PyTorchJob",
    name: str = "quad",
    steps: int = 5,
    sleep: float = 0.1,
    worker: bool = False,
) -> dict[str, Any]:
    """A template whose primary replica runs quadratic.py with --lr ${trialParameters.lr}.

    With `worker`, a Worker replica prints a far worse loss the runner must never read."""
    builder = make_job(kind, name).master(restart_policy="Never")
    builder.command(_command("${trialParameters.lr}", steps, sleep), "Master")
    builder.env("Master", **{TAG: tag})
    if worker:
        builder.workers(1, restart_policy="Never")
        builder.command(_command("5", steps, sleep), "Worker")
        builder.env("Worker", **{TAG: tag})
    return builder.build()


def _command(lr: str, steps: int, sleep: float) -> list[str]:
    return ["python", str(SCRIPT), "--lr", lr, "--steps", str(steps), "--sleep", str(sleep)]


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
    """Live replicas of this test (their environment carries the tag)."""
    marker = f"{TAG}={tag}".encode()
    return _live(lambda entry: marker in (entry / "environ").read_bytes().split(b"\0"))


def supervisors(home: Path) -> list[int]:
    """Live supervisors of jobs under `home`."""
    prefix = str(home)
    return _live(lambda entry: os.readlink(entry / "cwd").startswith(prefix))


def leftovers(tag: str, home: Path, timeout: float = 10.0) -> list[int]:
    """Replicas and supervisors still alive after up to `timeout` seconds (expected: none)."""
    deadline = time.monotonic() + timeout
    while (left := tagged_processes(tag) + supervisors(home)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
