"""A real MXNet parameter-server job as a trial: its metrics are worker 0's, the core's primary
replica for MXJob, not a parameter server's (which carries upstream's job-role: master label)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hpo_support import REPO
from trainop_hpo import TrialRunner

from trainop_core.client import TrainingClient

MXNET = REPO / "examples" / "mxnet"
pytestmark = [pytest.mark.slow, pytest.mark.mxnet]


def mxnet_template() -> dict[str, object]:
    job = yaml.safe_load((MXNET / "ps.yaml").read_text())
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["args"] = ["--epochs", "2", "--lr", "${trialParameters.lr}"]
    return dict(job)


def test_an_mxnet_trial_reads_worker_0s_metrics(client: TrainingClient, mxnet_venv: Path) -> None:
    runner = TrialRunner(mxnet_template(), client, workdir=MXNET)
    with runner.start({"lr": 0.1}, trial_id="mx1") as trial:
        assert trial.primary == "worker-0"
        streamed = [record.values for record in trial.metrics()]
        result = trial.result(timeout=300)

    assert result.state == "Succeeded", result.reason
    assert 0.5 < result.metrics["accuracy"] <= 1.0
    assert {"accuracy", "loss"} <= set(result.metrics)
    assert any("accuracy" in values for values in streamed)  # while it ran, from worker 0
