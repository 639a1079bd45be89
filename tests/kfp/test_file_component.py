"""`job_component(path)`: a job file's `${trialParameters.NAME}`s become typed component inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kfp_support import wait_until_no_processes
from trainop_kfp import job_component
from trainop_kfp.file_component import job_parameters

from trainop_core.client import TrainingClient
from trainop_core.errors import InvalidJobError

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "allreduce_template.yaml"
EXAMPLE = HERE.parents[1] / "examples" / "kfp" / "ddp_params.yaml"
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping:RuntimeWarning")


def inputs(component: object) -> dict[str, tuple[str, object]]:
    spec = component.component_spec.inputs  # type: ignore[attr-defined]
    return {name: (str(i.type), i.default) for name, i in spec.items()}


def test_annotated_defaults_give_typed_optional_inputs() -> None:
    found = inputs(job_component(EXAMPLE))

    assert found["epochs"] == ("Integer", 10)
    assert found["lr"] == ("Float", 0.05)


def test_a_parameter_without_a_default_is_a_required_string() -> None:
    found = inputs(job_component(TEMPLATE))

    assert found["lr"] == ("String", None)
    assert found["steps"] == ("Integer", 2)


def test_the_component_is_named_after_the_job_and_keeps_the_common_inputs() -> None:
    component = job_component(TEMPLATE)

    assert component.name == "allreduce-template"
    assert {"backend", "namespace", "timeout_seconds", "delete_after", "workdir"} <= set(
        inputs(component)
    )
    assert set(component.component_spec.outputs) == {"metrics", "state", "name"}


def write_template(tmp_path: Path, annotation: str | None, arg: str) -> Path:
    job = yaml.safe_load(TEMPLATE.read_text())
    job["metadata"]["annotations"] = {} if annotation is None else {
        "trainop.io/parameters": annotation
    }  # fmt: skip
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"] = [
        arg
    ]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.parametrize(
    ("annotation", "arg", "problem"),
    [
        ('{"steps": 2, "epochs": 3}', "${trialParameters.steps}", "epochs: is not used by the job"),
        (None, "${trialParameters.backend}", "'backend' cannot be a component input"),
        (None, "${trialParameters.learning-rate}", "not a Python identifier"),
        ("[1, 2]", "x", "expected a JSON or YAML mapping"),
        ('{"steps": [1]}', "${trialParameters.steps}", "expected a string, number or boolean"),
    ],
    ids=[
        "a default for a parameter the job does not use is an error",
        "a parameter may not shadow a common input",
        "a parameter name must be an identifier",
        "the annotation must be a mapping",
        "a default must be a scalar",
    ],
)
def test_a_bad_template_is_reported_before_any_pipeline_exists(
    tmp_path: Path, annotation: str | None, arg: str, problem: str
) -> None:
    with pytest.raises(InvalidJobError, match=problem):
        job_component(write_template(tmp_path, annotation, arg))


def test_parameters_are_found_wherever_the_job_uses_them() -> None:
    template = yaml.safe_load(TEMPLATE.read_text())

    assert set(job_parameters(template)) == {"steps", "lr"}


@pytest.mark.slow
def test_inputs_reach_every_replica_of_the_job(kfp_local: Path, tag: str) -> None:
    component = job_component(TEMPLATE, backend="local")
    steps, lr, world = 3, 0.4, 2  # 1 Master + 1 Worker

    task = component(steps=steps, lr=str(lr), workdir=str(HERE), timeout_seconds=300)

    assert task.outputs["state"] == "Succeeded"
    metrics = task.outputs["metrics"].metadata
    assert metrics["world_size"] == world
    assert metrics["loss"] == pytest.approx(4.0 * (1 - lr / world) ** steps, rel=1e-5)
    assert TrainingClient().list() == []
    assert wait_until_no_processes(tag) == []
