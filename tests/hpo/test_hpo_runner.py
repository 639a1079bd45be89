"""The ask/tell trial runner on the real local backend, without Ray: each trial is a job whose
replicas are real processes; metrics stream from the primary replica while it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import make_trainjob
from hpo_support import TAG, leftovers, quadratic_command, quadratic_loss, quadratic_template
from trainop_hpo import TrialRunner

from trainop_core.client import TrainingClient, is_finished
from trainop_core.errors import InvalidJobError, NotFoundError


@pytest.mark.parametrize(
    "kind", ["PyTorchJob", "XGBoostJob"], ids=["a PyTorchJob", "an XGBoostJob"]
)
def test_metrics_of_the_primary_replica_stream_in_order_while_the_job_runs(
    client: TrainingClient, home: Path, tag: str, kind: str
) -> None:
    template = quadratic_template(tag, kind=kind, steps=4, sleep=0.3, worker=True)
    runner = TrialRunner(template, client, namespace="hpo")
    with runner.start({"lr": 0.02}, trial_id="a1") as trial:
        running_when_received = []
        steps = []
        for record in trial.metrics():
            job = client.get(trial.job_name, "hpo")
            running_when_received.append(not is_finished(job))
            steps.append(record.step)
            assert record.values == {"loss": pytest.approx(quadratic_loss(0.02, record.step))}
            assert record.progress_percentage == 25 * record.step  # apart from the metrics
        result = trial.result()
    assert steps == [1, 2, 3, 4]
    assert running_when_received[0], "the first line arrived only after the job had finished"
    assert result.state == "Succeeded"
    assert result.metrics == {"loss": pytest.approx(quadratic_loss(0.02, 4))}
    assert result.progress == {"progressPercentage": 100}
    assert result.job_name == trial.job_name == runner.job_name("a1")
    assert client.list("hpo") == [], "leaving the with block deletes the job"
    assert leftovers(tag, home) == []


def test_stop_deletes_the_job_and_kills_every_replica(
    client: TrainingClient, home: Path, tag: str
) -> None:
    template = quadratic_template(tag, steps=100, sleep=0.2, worker=True)
    trial = TrialRunner(template, client).start({"lr": 0.5})
    first = next(iter(trial.metrics()))
    assert first.step == 1
    stopped = trial.stop("not promising")
    assert stopped.state == "Stopped"
    assert stopped.reason == "not promising"
    assert stopped.metrics == {"loss": pytest.approx(quadratic_loss(0.5, 1))}
    assert trial.result() == stopped
    with pytest.raises(NotFoundError):
        client.get(trial.job_name, "default")
    assert leftovers(tag, home, timeout=2.0) == []
    assert trial.stop() == stopped, "stop is idempotent"


def test_a_failed_job_is_a_failed_result_with_the_job_reason_and_its_last_output(
    client: TrainingClient, tag: str
) -> None:
    with TrialRunner(quadratic_template(tag), client).start({"lr": -1}) as trial:
        assert list(trial.metrics()) == []
        result = trial.result(timeout=60)
    assert result.state == "Failed"
    assert "Master replica(s) failed" in result.reason
    assert result.last_output[-1] == "error: --lr must not be negative, got -1.0"


def test_parameters_must_match_the_placeholders_before_anything_is_created(
    client: TrainingClient, tag: str
) -> None:
    runner = TrialRunner(quadratic_template(tag), client)
    with pytest.raises(InvalidJobError) as missing:
        runner.start({})
    with pytest.raises(InvalidJobError) as unused:
        runner.start({"lr": 0.1, "momentum": 0.9})
    assert "needs a value for trial parameter 'lr'" in str(missing.value)
    assert "parameters.momentum" in str(unused.value)
    assert client.list() == []


def test_relative_paths_resolve_against_the_template_file(client: TrainingClient) -> None:
    repo = Path(__file__).resolve().parents[2]
    runner = TrialRunner(repo / "examples" / "hpo" / "quadratic.yaml", client)
    with runner.start({"lr": 0.01}) as trial:
        result = trial.result(timeout=60)
    assert result.state == "Succeeded", result
    assert result.metrics["loss"] == pytest.approx(quadratic_loss(0.01, 5))


@pytest.mark.slow
def test_an_mpijob_trial_reads_rank_0_s_metrics_through_the_launcher(
    client: TrainingClient,
) -> None:
    """The trial's primary replica is MPI's launcher: mpirun forwards rank 0's `name=value`
    lines there (examples/mpi, its learning rate a trial parameter)."""
    import yaml

    example = Path(__file__).resolve().parents[2] / "examples" / "mpi" / "logreg.yaml"
    job = yaml.safe_load(example.read_text())
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] += ["--lr", "${trialParameters.lr}", "--epochs", "50"]
    job["metadata"]["namespace"] = "hpo"
    runner = TrialRunner(job, client, namespace="hpo", workdir=example.parent)
    with runner.start({"lr": 0.3}, trial_id="mpi") as trial:
        result = trial.result()
    assert result.state == "Succeeded", result
    assert result.metrics["accuracy"] > 0.9


@pytest.mark.slow
def test_an_mpi_trainjob_trial_reads_rank_0_s_metrics_through_the_launcher(
    client: TrainingClient,
) -> None:
    """On mpi-distributed the primary replica is the launcher (mpirun forwards rank 0's
    `name=value` lines there), not node 0, which only hosts a rank."""
    import yaml

    example = Path(__file__).resolve().parents[2] / "examples" / "mpi" / "logreg-trainjob.yaml"
    job = yaml.safe_load(example.read_text())
    job["spec"]["trainer"]["command"] += ["--lr", "${trialParameters.lr}", "--epochs", "50"]
    job["metadata"]["namespace"] = "hpo"
    runner = TrialRunner(job, client, namespace="hpo", workdir=example.parent)
    with runner.start({"lr": 0.3}, trial_id="mpi-tj") as trial:
        result = trial.result()
    assert trial.primary == "launcher-0"
    assert result.state == "Succeeded", result
    assert result.metrics["accuracy"] > 0.9


def test_a_trainjob_template_is_a_trial_whose_node_0_reports(
    client: TrainingClient, home: Path, tag: str
) -> None:
    command = quadratic_command("${trialParameters.lr}", 3, 0.05)
    template = make_trainjob(
        "quad", trainer={"numNodes": 2, "command": command, "env": [{"name": TAG, "value": tag}]}
    )
    with TrialRunner(template, client).start({"lr": 0.02}, trial_id="t1") as trial:
        result = trial.result()
    assert trial.primary == "node-0"
    assert result.state == "Succeeded"
    assert result.metrics == {"loss": pytest.approx(quadratic_loss(0.02, 3))}
    assert leftovers(tag, home) == []
