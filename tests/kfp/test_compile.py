"""What must stay stable in compiled pipeline YAML (golden files), and what only a cluster would
run: the passthroughs and the container component's command.

Regenerate the golden files after an intended change with
    TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/kfp/test_compile.py
and review the diff.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler
from kfp_support import python_job
from trainop_kfp import IMAGE, run_training_job, trainop_run
from trainop_kfp.constants import DEFAULT_BACKEND, DEFAULT_TIMEOUT_SECONDS

from trainop_core.client import TrainingClient

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
EXAMPLE = HERE.parents[1] / "examples" / "kfp" / "pipeline.py"
PASSTHROUGHS = [
    {"field": "RESOURCES"},
    {"field": "ENV", "applyToTask": True},
    {"field": "KUBERNETES_TOLERATIONS"},
    {"field": "KUBERNETES_NODE_SELECTOR"},
    {"field": "KUBERNETES_AFFINITY"},
    {"field": "KUBERNETES_VOLUMES"},
]


def example_pipeline() -> Any:
    spec = importlib.util.spec_from_file_location("kfp_example_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ddp_pipeline


def compiled(target: Any, tmp_path: Path) -> str:
    path = tmp_path / "compiled.yaml"
    compiler.Compiler().compile(target, package_path=str(path))
    return path.read_text()


TARGETS: dict[str, Callable[[], Any]] = {
    "run_training_job": lambda: run_training_job,
    "trainop_run": lambda: trainop_run,
    "example_pipeline": example_pipeline,
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_compiled_yaml_matches_the_golden_file(name: str, tmp_path: Path) -> None:
    text = compiled(TARGETS[name](), tmp_path)
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert text == golden.read_text(), f"regenerate with TRAINOP_UPDATE_GOLDEN=1 ({golden})"


@pytest.mark.parametrize("name", ["run_training_job", "example_pipeline"])
def test_compiled_python_components_carry_the_task_config_passthroughs(
    name: str, tmp_path: Path
) -> None:
    ir = yaml.safe_load(compiled(TARGETS[name](), tmp_path))

    (component,) = ir["components"].values()
    assert component["taskConfigPassthroughs"] == PASSTHROUGHS
    assert "task_config" in component["inputDefinitions"]["parameters"]


def test_every_component_runs_in_the_project_image_without_installing_kfp(tmp_path: Path) -> None:
    ir = yaml.safe_load(compiled(example_pipeline(), tmp_path))

    (executor,) = ir["deploymentSpec"]["executors"].values()
    assert executor["container"]["image"] == IMAGE
    assert "pip install" not in " ".join(executor["container"]["command"])


def test_the_component_defaults_are_the_documented_constants() -> None:
    parameters = run_training_job.component_spec.inputs

    assert parameters["backend"].default == DEFAULT_BACKEND
    assert parameters["timeout_seconds"].default == DEFAULT_TIMEOUT_SECONDS
    assert trainop_run.component_spec.inputs["backend"].default == DEFAULT_BACKEND


def test_the_container_components_command_runs_trainop_on_the_job_text(
    tmp_path: Path, tag: str
) -> None:
    """SubprocessRunner cannot run container components: run the compiled command and args
    with a `trainop` on PATH (the image's console script), as the container would."""
    container = yaml.safe_load(compiled(trainop_run, tmp_path))["deploymentSpec"]["executors"]
    (spec,) = [e["container"] for e in container.values()]
    job = yaml.safe_dump(python_job("from-container", "print('accuracy=0.75')"))
    values = {"job_yaml": job, "backend": "local", "namespace": "", "timeout_seconds": "60"}
    args = [_fill(arg, values) for arg in spec["args"]]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "trainop").write_text(f'#!/bin/sh\nexec {sys.executable} -m trainop_core "$@"\n')
    (bin_dir / "trainop").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    done = subprocess.run(
        [*spec["command"], *args], env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert "master-0 | accuracy=0.75" in done.stdout
    assert 'pytorchjob.kubeflow.org "from-container" deleted' in done.stderr
    assert TrainingClient().list() == []  # --rm: the step leaves no job behind


def _fill(arg: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        arg = arg.replace(f"{{{{$.inputs.parameters['{name}']}}}}", value)
    return arg
