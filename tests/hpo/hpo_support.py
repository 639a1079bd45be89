"""Helpers for the HPO tests: job templates around examples/hpo/quadratic.py, the loss formula
the script prints, and scans for processes a test left behind.

Every replica a test starts carries `HPO_TEST_TAG=<tag>` in its container env, so a scan of
/proc finds exactly that test's replicas; supervisors are found by their working directory (the
job's directory under the test's TRAINOP_HOME).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import processes
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
    builder.command(quadratic_command("${trialParameters.lr}", steps, sleep), "Master")
    builder.env("Master", **{TAG: tag})
    if worker:
        builder.workers(1, restart_policy="Never")
        builder.command(quadratic_command("5", steps, sleep), "Worker")
        builder.env("Worker", **{TAG: tag})
    return builder.build()


def quadratic_command(lr: str, steps: int, sleep: float) -> list[str]:
    """quadratic.py's argv: `lr` may be a template placeholder."""
    return ["python", str(SCRIPT), "--lr", lr, "--steps", str(steps), "--sleep", str(sleep)]


def tagged_processes(tag: str) -> list[int]:
    """Pids of live processes whose environment carries `tag`: the test's replicas."""
    return processes.tagged_processes(TAG, tag)


def leftovers(tag: str, home: Path, timeout: float = 10.0) -> list[int]:
    """Replicas and supervisors still alive after up to `timeout` seconds (expected: none)."""
    return processes.leftovers(TAG, tag, home, timeout)
