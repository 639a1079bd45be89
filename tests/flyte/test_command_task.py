"""`TrainingJobCommandTask`: a job whose replicas run a command is one workflow step; its outputs
are the final state and the metrics the primary (or a named) replica printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_job, make_trainjob
from flytekit import workflow
from trainop_flyte import TrainingJobCommandTask, TrainingJobFailed

from trainop_core.errors import InvalidJobError

MXNET = Path(__file__).resolve().parents[2] / "examples" / "mxnet"

PRINT_METRICS = "import os; print('accuracy=0.75 loss={{.inputs.loss}} rank=' + os.environ['RANK'])"


def metrics_job(code: str = PRINT_METRICS) -> dict[str, Any]:
    command = ["python", "-c", code]
    return (
        make_job("XGBoostJob", "metrics")
        .master(command=command)
        .workers(1, command=command)
        .build()
    )


def metrics_task(name: str, code: str = PRINT_METRICS) -> TrainingJobCommandTask:
    return TrainingJobCommandTask(
        name=name,
        job=metrics_job(code),
        inputs={"loss": float},
        outputs={"state": str, "accuracy": float, "metrics": dict[str, float]},
    )


def test_outputs_are_the_final_state_and_the_primary_replicas_metrics() -> None:
    task = metrics_task("print_metrics")

    state, accuracy, metrics = task(loss=0.25)

    assert state == "Succeeded"
    assert accuracy == 0.75
    assert metrics == {"accuracy": 0.75, "loss": 0.25, "rank": 0.0}  # the master is rank 0


def test_a_command_task_is_a_workflow_step() -> None:
    task = metrics_task("print_metrics_in_wf")

    @workflow
    def wf(loss: float = 0.5) -> float:
        _state, accuracy, _metrics = task(loss=loss)
        return accuracy

    assert wf(loss=0.1) == 0.75


def test_a_declared_metric_that_was_never_printed_fails_the_task() -> None:
    task = TrainingJobCommandTask(
        name="no_such_metric",
        job=metrics_job("print('accuracy=1')"),
        outputs={"f1": float},
    )
    with pytest.raises(TrainingJobFailed, match="metric 'f1' was not reported"):
        task()


def test_a_failing_command_fails_the_task_with_its_log() -> None:
    task = TrainingJobCommandTask(
        name="crash",
        job=metrics_job("raise SystemExit('disk full')"),
        outputs={"state": str},
    )
    with pytest.raises(TrainingJobFailed, match="disk full"):
        task()


def test_an_invalid_job_is_refused_when_the_task_is_defined() -> None:
    bad = make_job("TFJob", "bad").workers(-1).build()
    with pytest.raises(InvalidJobError, match=r"spec\.tfReplicaSpecs\.Worker\.replicas"):
        TrainingJobCommandTask(name="bad", job=bad)


def test_outputs_must_have_the_type_of_their_role() -> None:
    with pytest.raises(TypeError, match="'state'"):
        TrainingJobCommandTask(name="typed", job=metrics_job(), outputs={"state": int})


@pytest.mark.slow
@pytest.mark.mxnet
def test_the_mxnet_parameter_server_example_runs_as_a_workflow_step(mxnet_venv: Path) -> None:
    job = yaml.safe_load((MXNET / "ps.yaml").read_text())
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
        "--epochs",
        "{{.inputs.epochs}}",
    ]
    task = TrainingJobCommandTask(
        name="mxnet_ps",
        job=job,
        workdir=MXNET,
        inputs={"epochs": int},
        outputs={"state": str, "accuracy": float, "metrics": dict[str, float]},
    )

    state, accuracy, metrics = task(epochs=2)  # read from worker 0, the core's primary

    assert state == "Succeeded"
    assert 0.5 < accuracy <= 1.0
    assert set(metrics) >= {"accuracy", "loss"}


def test_a_trainjob_is_a_command_task_whose_node_0_reports() -> None:
    code = (
        "import os; print('accuracy=0.5 loss={{.inputs.loss}} rank=' + os.environ['PET_NODE_RANK'])"
    )
    trainjob = make_trainjob(trainer={"numNodes": 2, "command": ["python", "-c", code]})
    task = TrainingJobCommandTask(
        name="trainjob_metrics",
        job=trainjob,
        inputs={"loss": float},
        outputs={"state": str, "metrics": dict[str, float]},
    )

    state, metrics = task(loss=0.125)

    assert state == "Succeeded"
    assert metrics == {"accuracy": 0.5, "loss": 0.125, "rank": 0.0}  # node 0's


@pytest.mark.slow
def test_an_mpi_trainjob_is_a_command_task_whose_launcher_reports() -> None:
    """examples/mpi's TrainJob on mpi-distributed: the task's input reaches the launcher's mpirun
    command, and its outputs are read from the launcher (mpirun forwards rank 0's lines)."""
    mpi = Path(__file__).resolve().parents[2] / "examples" / "mpi"
    trainjob = yaml.safe_load((mpi / "logreg-trainjob.yaml").read_text())
    trainjob["spec"]["trainer"]["command"] += ["--epochs", "{{.inputs.epochs}}"]
    task = TrainingJobCommandTask(
        name="mpi_trainjob",
        job=trainjob,
        workdir=mpi,
        inputs={"epochs": int},
        outputs={"state": str, "accuracy": float},
    )

    state, accuracy = task(epochs=50)

    assert state == "Succeeded"
    assert 0.9 < accuracy <= 1.0


def test_a_trainjob_naming_no_runtime_is_refused_when_the_task_is_defined() -> None:
    trainjob = make_trainjob(runtime="no-such-runtime")
    with pytest.raises(InvalidJobError, match=r"spec\.runtimeRef\.name"):
        TrainingJobCommandTask(name="no_runtime", job=trainjob)
