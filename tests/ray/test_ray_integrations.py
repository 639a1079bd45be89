"""The integrations on the Ray backend, unchanged: a KFP step (`run_job`, what
`run_training_job` runs) and the Flyte connector (`pyflyte serve connector` with
TRAINOP_FLYTE_BACKEND=ray) run their jobs on the cluster."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from ray_helpers import leftovers, py, tagged, until

METRICS = py("import os; print('accuracy=0.75 rank=' + os.environ['RANK'])")


@pytest.mark.slow
def test_a_kfp_step_runs_its_job_on_ray(
    ray_cluster: Any,
    tag: str,
    tmp_path: Path,
) -> None:
    from trainop_kfp.runner import run_job

    (tmp_path / "notes.txt").write_text("shipped\n")  # the step's `workdir`, shipped with it
    read = py("import os; print(open('notes.txt').read().strip(), os.environ['RANK'])")
    job = make_job("PyTorchJob", "kfp-step").master(command=read)
    lines: list[str] = []
    result = run_job(tagged(job, tag), backend="ray", workdir=tmp_path, echo=lines.append)
    assert result.state == "Succeeded"
    assert "master-0 | shipped 0" in lines
    until(lambda: not leftovers(tag), what="the step's job deleted")


@pytest.mark.slow
def test_the_flyte_connector_runs_a_command_task_on_ray(
    ray_cluster: Any, tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("flytekit")
    monkeypatch.chdir(tmp_path)  # the connector's directory, shipped with the task's job
    from flyteidl.core.execution_pb2 import TaskExecution
    from flytekit.configuration import ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable
    from trainop_flyte import TrainingJobCommandTask
    from trainop_flyte.connector import TrainingJobConnector

    monkeypatch.setenv("TRAINOP_FLYTE_BACKEND", "ray")
    job = make_job("PyTorchJob", "flyte-step").master(command=METRICS)
    task = TrainingJobCommandTask(
        name="on_ray", job=tagged(job, tag), outputs={"state": str, "accuracy": float}
    )
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    template = get_serializable(OrderedDict(), settings, task).template
    connector = TrainingJobConnector()  # its client: TrainingClient(backend=$TRAINOP_FLYTE_BACKEND)
    meta = connector.create(template, "/tmp/unused-output-prefix")
    done = (TaskExecution.SUCCEEDED, TaskExecution.FAILED)
    resource = until(
        lambda: (r := connector.get(meta)).phase in done and r, timeout=120, what="task done"
    )
    assert resource.phase == TaskExecution.SUCCEEDED, resource.message
    outputs = {
        name: literal.scalar.primitive for name, literal in resource.outputs.literals.items()
    }
    assert outputs["state"].string_value == "Succeeded"
    assert outputs["accuracy"].float_value == 0.75
    connector.delete(meta)
    until(lambda: not leftovers(tag), what="the task's job deleted")
