"""What must stay stable in compiled pipeline YAML (golden files), and what only a cluster would
run: the passthroughs, and the install step of the stock image every component runs in.

Regenerate the golden files after an intended change with
    TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/kfp/test_compile.py
and review the diff.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kfp
import pytest
import yaml
from kfp import compiler
from trainop_kfp import IMAGE, PACKAGE, run_training_job, trainop_run
from trainop_kfp.constants import DEFAULT_BACKEND, DEFAULT_TIMEOUT_SECONDS, PACKAGE_ENV

import trainop_core

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


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_component_runs_in_a_stock_python_image_and_installs_this_trainop(
    name: str, tmp_path: Path
) -> None:
    ir = yaml.safe_load(compiled(TARGETS[name](), tmp_path))

    (executor,) = ir["deploymentSpec"]["executors"].values()
    assert executor["container"]["image"] == IMAGE == "python:3.11-slim"
    install = executor["container"]["command"][2]
    assert f"python3 -m pip install --quiet --no-warn-script-location '{PACKAGE}'" in install
    assert f"'kfp=={kfp.__version__}' '--no-deps'" in install  # KFP's own runtime
    assert install.index(PACKAGE) < install.index('"$0" "$@"')  # before the component runs


def test_the_package_is_this_release_and_said_in_one_place() -> None:
    assert f"trainop=={trainop_core.__version__}" == PACKAGE
    assert trainop_core.__version__ == importlib.metadata.version("trainop")
    sources = (HERE.parents[1] / "integrations" / "kfp" / "trainop_kfp").glob("*.py")
    naming = sorted(p.name for p in sources if "python:3" in p.read_text())
    assert naming == ["constants.py"]


def test_a_build_of_ones_own_is_installed_from_the_requirement_given_at_compile_time() -> None:
    wheel = "trainop @ https://example.org/trainop-0.1.0.dev1-py3-none-any.whl"
    code = "from trainop_kfp.constants import PACKAGE; print(PACKAGE)"
    env = {**os.environ, PACKAGE_ENV: wheel}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == wheel, done.stderr


def test_the_component_defaults_are_the_documented_constants() -> None:
    parameters = run_training_job.component_spec.inputs

    assert parameters["backend"].default == DEFAULT_BACKEND
    assert parameters["timeout_seconds"].default == DEFAULT_TIMEOUT_SECONDS
    assert trainop_run.component_spec.inputs["backend"].default == DEFAULT_BACKEND
    timeout = trainop_run.component_spec.inputs["timeout_seconds"].default
    assert timeout == DEFAULT_TIMEOUT_SECONDS
