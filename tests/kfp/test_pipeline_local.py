"""Pipelines under kfp.local (SubprocessRunner, this interpreter) running real jobs on the local
backend: the component's process submits the job, whose replicas are processes of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from kfp_support import (
    allreduce_job,
    parent,
    python_job,
    tagged_processes,
    wait_until_no_processes,
)
from trainop_kfp import run_training_job, trainop_run

from trainop_core.client import TrainingClient, job_state

HERE = Path(__file__).resolve().parent
# kfp.local warns that the project image is not a python:* image; the interpreter here is right.
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


@pytest.mark.slow
def test_a_distributed_pytorch_job_succeeds_and_its_metrics_reach_the_artifact(
    kfp_local: Path, tag: str
) -> None:
    from pipelines import train_pipeline

    steps, lr, world = 4, 0.3, 3  # 1 Master + 2 Workers
    job = allreduce_job("ddp-metrics", 2, ("--steps", str(steps), "--lr", str(lr)))

    run = train_pipeline(job=job)

    assert run.outputs["state"] == "Succeeded"
    assert run.outputs["name"] == "ddp-metrics"
    metrics = run.outputs["metrics"].metadata
    assert metrics["world_size"] == world  # every replica took part in the all_reduce
    # Each step scales the weight by (1 - lr / world): the gradient all_reduce summed all ranks.
    expected_loss = 4.0 * (1 - lr / world) ** steps
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert metrics["accuracy"] == pytest.approx(1 / (1 + expected_loss), rel=1e-5)
    assert TrainingClient().list() == []  # delete_after defaults to True
    assert wait_until_no_processes(tag) == []


def test_a_failed_job_fails_the_task_with_the_jobs_reason(
    kfp_local: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from pipelines import train_pipeline

    job = python_job("kfp-broken", "import sys; print('about to fail'); sys.exit(7)")

    with pytest.raises(RuntimeError, match="FAILURE"):
        train_pipeline(job=job)

    output = capfd.readouterr().out
    assert "master-0 | about to fail" in output  # the primary's log streamed into the task's
    assert "TrainingJobFailed: job default/kfp-broken Failed: " in output
    assert "PyTorchJob kfp-broken is failed because" in output  # the Failed condition's message


def test_a_timeout_fails_the_task_and_deletes_the_job(
    kfp_local: Path, tag: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from pipelines import train_pipeline

    job = python_job("kfp-slow", "import time; print('sleeping', flush=True); time.sleep(300)")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="FAILURE"):
        train_pipeline(job=job, timeout_seconds=3)

    assert time.monotonic() - started < 60
    assert "did not finish within 3 s; it was deleted" in capfd.readouterr().out
    assert TrainingClient().list() == []
    assert wait_until_no_processes(tag) == []


@pytest.mark.parametrize("component", ["run_training_job", "trainop_run"])
def test_both_components_run_under_kfp_local_and_a_timeout_of_0_is_no_limit(
    kfp_local: Path, tag: str, component: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = "import time; time.sleep(2); print('accuracy=0.75 progressPercentage=100', flush=True)"
    job = python_job("kfp-no-limit", code)

    if component == "run_training_job":
        task = run_training_job(job=job, backend="local", timeout_seconds=0)
        assert task.outputs["state"] == "Succeeded"
        # the metrics artifact, where a KFP user looks: the metrics and the progress last said
        assert task.outputs["metrics"].metadata == {"accuracy": 0.75, "progressPercentage": 100}
    else:
        trainop_run(job_yaml=yaml.safe_dump(job), backend="local", timeout_seconds=0)

    assert "master-0 | accuracy=0.75 progressPercentage=100" in capfd.readouterr().out
    assert TrainingClient().list() == []  # deleted at the end either way
    assert wait_until_no_processes(tag) == []


def test_trainop_run_fails_the_step_when_the_job_fails_and_deletes_it(
    kfp_local: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    job = python_job("kfp-run-broken", "import sys; print('about to fail'); sys.exit(7)")

    with pytest.raises(RuntimeError, match="FAILURE"):
        trainop_run(job_yaml=yaml.safe_dump(job), backend="local")

    assert "master-0 | about to fail" in capfd.readouterr().out
    assert TrainingClient().list() == []


_CANCELLED_RUN = """
    import sys
    sys.path[:0] = {paths!r}
    from kfp import local
    from kfp_support import python_job
    from pipelines import train_pipeline

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root={root!r})
    train_pipeline(job=python_job("kfp-cancel", "import time; time.sleep(300)"))
"""


def test_sigterm_to_the_component_deletes_the_job(tmp_path: Path, tag: str) -> None:
    script = tmp_path / "run.py"
    paths = [str(HERE), str(HERE.parent)]
    script.write_text(textwrap.dedent(_CANCELLED_RUN.format(paths=paths, root=str(tmp_path))))
    env = {**os.environ, "PIP_NO_INDEX": "1"}  # the install step finds everything installed
    run = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        _wait_until_running("kfp-cancel")
        # kfp.local runs `sh -c 'pip install ... && sh -ec "... python -m kfp.dsl.executor_main
        # ..."'`: the component is the Python process running executor_main under `run` (the
        # local backend's supervisor may be a fork of it, elsewhere).
        (component,) = [
            pid
            for pid in tagged_processes(tag, cmdline="kfp.dsl.executor_main", program="python")
            if run.pid in _ancestors(pid)
        ]

        os.kill(component, signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
        left = [job.name for job in TrainingClient().list()]
    finally:
        run.kill()
        for job in TrainingClient().list():  # only if the test fails: leave nothing running
            TrainingClient().delete(job.name, job.namespace)

    assert "terminated (SIGTERM): the job was deleted" in output
    assert left == []
    assert wait_until_no_processes(tag) == []


def _ancestors(pid: int) -> list[int]:
    found = []
    while (pid := parent(pid)) > 1:
        found.append(pid)
    return found


def _wait_until_running(name: str, timeout: float = 60.0) -> None:
    client, deadline = TrainingClient(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [job for job in client.list() if job.name == name]
        if jobs and job_state(jobs[0]) == "Running":
            return
        time.sleep(0.2)
    raise AssertionError(f"job {name} was not Running after {timeout:g} s")
