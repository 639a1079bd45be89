"""`pyflyte run` as a user types it, in a subprocess: the job runs on the local backend."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def pyflyte_run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    pyflyte = shutil.which("pyflyte")
    if pyflyte is None:
        pytest.skip("pyflyte is not on PATH")
    paths = [str(REPO), str(REPO / "integrations" / "flyte"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        [pyflyte, "run", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_pyflyte_run_returns_the_master_replicas_output() -> None:
    done = pyflyte_run("flyte_tasks.py", "pytorch_env_wf", "--tag", "cli", cwd=HERE)

    assert done.returncode == 0, done.stderr[-2000:]
    report = ast.literal_eval(done.stdout[done.stdout.index("{") :].strip())
    assert report["tag"] == "cli"
    assert (report["RANK"], report["WORLD_SIZE"]) == ("0", "2")


@pytest.mark.slow
def test_the_ddp_example_workflow_runs_with_pyflyte_run() -> None:
    done = pyflyte_run("examples/flyte/ddp_workflow.py", "wf", "--epochs", "2", cwd=REPO)

    assert done.returncode == 0, done.stderr[-2000:]
    assert "world_size=3 rank_sum=3" in done.stdout
