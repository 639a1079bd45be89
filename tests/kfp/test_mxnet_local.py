"""A real MXNet parameter-server job through `run_training_job` under kfp.local: the step's
metrics artifact holds worker 0's metrics (the core's primary replica for MXJob), not those of a
parameter server (which carries upstream's job-role: master label)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from trainop_kfp import run_training_job

from trainop_core.client import TrainingClient

MXNET = Path(__file__).resolve().parents[2] / "examples" / "mxnet"
pytestmark = [pytest.mark.slow, pytest.mark.mxnet]


def test_the_metrics_artifact_holds_worker_0s_metrics(
    kfp_local: Path, mxnet_venv: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    job = yaml.safe_load((MXNET / "ps.yaml").read_text())
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["args"] = ["--epochs", "2"]

    task = run_training_job(job=job, backend="local", workdir=str(MXNET), timeout_seconds=300)

    assert task.outputs["state"] == "Succeeded"
    metrics = task.outputs["metrics"].metadata
    assert 0.5 < metrics["accuracy"] <= 1.0 and "loss" in metrics
    assert "worker-0 | accuracy=" in capfd.readouterr().out  # the step's log is worker 0's
    assert TrainingClient().list() == []
