"""`run_job`, the components' body, on the real local backend (replicas are real processes)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from builders import make_trainjob
from kfp_support import python_job, wait_until_no_processes
from trainop_kfp.runner import TrainingJobFailed, run_job

from trainop_core.client import TrainingClient
from trainop_core.errors import InvalidJobError, JobTimeoutError


def test_a_succeeded_job_returns_the_metrics_its_primary_replica_printed(tag: str) -> None:
    code = (
        "import os; print('loss=0.5 step=1 progressPercentage=50 estimatedRemainingSeconds=3'); "
        "print(f'loss=0.25 rank={os.environ[\"RANK\"]}')"
    )
    echoed: list[str] = []

    result = run_job(python_job("ok", code), timeout_seconds=60, echo=echoed.append)

    assert result.state == "Succeeded"
    assert result.metrics == {"loss": 0.25, "rank": 0.0}  # the Master's, not the Worker's
    assert result.progress == {"progressPercentage": 50, "estimatedRemainingSeconds": 3}
    assert "master-0 | loss=0.25 rank=0" in echoed
    assert TrainingClient().list() == []  # delete_after


def test_a_failed_job_raises_with_the_jobs_reason(tag: str) -> None:
    with pytest.raises(TrainingJobFailed) as caught:
        code = "print('out of disk on /data', flush=True); raise SystemExit(3)"
        run_job(python_job("broken", code), timeout_seconds=60, echo=print)

    job_message = caught.value.result.message
    assert caught.value.result.state == "Failed"
    assert "broken" in job_message and "fail" in job_message
    assert job_message in str(caught.value)
    assert "out of disk on /data" in str(caught.value)  # the primary replica's last lines


def test_a_failed_job_is_kept_when_asked(tag: str) -> None:
    with pytest.raises(TrainingJobFailed):
        run_job(python_job("kept", "raise SystemExit(3)"), delete_after=False, echo=print)

    assert [job.name for job in TrainingClient().list()] == ["kept"]
    TrainingClient().delete("kept", "default")


def test_a_timeout_deletes_the_job_and_leaves_no_process(tag: str) -> None:
    job = python_job("slow", "import time; time.sleep(120)")

    with pytest.raises(JobTimeoutError, match=r"did not finish within 1\.5 s"):
        run_job(job, timeout_seconds=1.5, echo=print)

    assert TrainingClient().list() == []
    assert wait_until_no_processes(tag) == []


def test_an_invalid_job_creates_nothing() -> None:
    job = python_job("bad", "pass")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"

    with pytest.raises(InvalidJobError, match=r"Worker\.replicas"):
        run_job(job, echo=print)

    assert TrainingClient().list() == []


def test_the_component_body_takes_yaml_text_and_logs_metrics_to_the_artifact(tag: str) -> None:
    from kfp.dsl import Metrics
    from trainop_kfp.runner import run_component

    text = yaml.safe_dump(python_job("from-text", "print('accuracy=0.875 loss=0.5')"))
    metrics = Metrics(name="metrics", uri="unused://", metadata={})

    state, name = run_component(metrics=metrics, job_yaml=text, backend="local")

    assert (state, name) == ("Succeeded", "from-text")
    assert metrics.metadata == {"accuracy": 0.875, "loss": 0.5}


@pytest.mark.parametrize(
    ("job", "job_yaml"),
    [(None, ""), ({"kind": "PyTorchJob"}, "kind: PyTorchJob")],
    ids=["no job at all", "both a dict and YAML text"],
)
def test_the_component_body_wants_exactly_one_job(
    job: dict[str, str] | None, job_yaml: str
) -> None:
    from kfp.dsl import Metrics
    from trainop_kfp.runner import run_component

    with pytest.raises(InvalidJobError, match="exactly one of job"):
        run_component(metrics=Metrics(), job=job, job_yaml=job_yaml, backend="local")


def test_the_runner_imports_no_kfp() -> None:
    """Inside a running component kfp's `dsl` is a slim runtime module: the body's import of
    the runner must not need the rest of kfp."""
    code = (
        "import sys, trainop_kfp.runner\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kfp'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == "[]"


def test_a_trainjob_runs_like_any_job_and_node_0_is_the_primary(tag: str) -> None:
    code = "import os; print(f'loss=0.25 rank={os.environ[\"PET_NODE_RANK\"]}')"
    job = make_trainjob(trainer={"numNodes": 2, "command": [sys.executable, "-c", code]})
    echoed: list[str] = []

    result = run_job(job, timeout_seconds=60, echo=echoed.append)

    assert result.state == "Succeeded"
    assert result.metrics == {"loss": 0.25, "rank": 0.0}  # node 0's
    assert "node-0 | loss=0.25 rank=0" in echoed
    assert TrainingClient().list() == []
