"""What must stay stable in compiled pipeline YAML (golden files), and what only a cluster would
run: the passthroughs, and the install steps of the stock image every component runs in (the pod's
side of them runs in test_pod_start.py).

Regenerate the golden files after an intended change with
    TRAINOP_UPDATE_GOLDEN=1 python -m pytest tests/kfp/test_compile.py
and review the diff. The embedded trainop wheel changes with every change of the code, so the
golden files hold placeholders for its parts and its digest.
"""

from __future__ import annotations

import importlib.util
import os
import re
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
from trainop_kfp.wheel import build_wheel, install_stage

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


def without_the_wheel(text: str) -> str:
    """The compiled text with the wheel's parts, digest and part count as placeholders."""
    wheel = build_wheel()
    chunks = install_stage(wheel)[4:]
    for chunk in chunks:
        assert text.count(chunk) >= 1, "the wheel's parts are not in the YAML verbatim"
        text = text.replace(chunk, "<part of the trainop wheel>")
    text = re.sub(
        r"(( *)- <part of the trainop wheel>\n)+", r"\2- <parts of the trainop wheel>\n", text
    )
    return (
        text.replace(wheel.sha256, "<sha256 of the trainop wheel>")
        .replace(f"sys.argv[2:{2 + len(chunks)}]", "sys.argv[2:<2 + parts>]")
        .replace(f"shift {len(chunks)}", "shift <parts>")
    )


TARGETS: dict[str, Callable[[], Any]] = {
    "run_training_job": lambda: run_training_job,
    "trainop_run": lambda: trainop_run,
    "example_pipeline": example_pipeline,
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_compiled_yaml_matches_the_golden_file(name: str, tmp_path: Path) -> None:
    text = without_the_wheel(compiled(TARGETS[name](), tmp_path))
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
def test_every_component_runs_in_a_stock_python_image_and_installs_the_wheel_it_carries(
    name: str, tmp_path: Path
) -> None:
    ir = yaml.safe_load(compiled(TARGETS[name](), tmp_path))

    (executor,) = ir["deploymentSpec"]["executors"].values()
    assert executor["container"]["image"] == IMAGE == "python:3.11-slim"
    command = executor["container"]["command"]
    kfp_install, stage = command[2], install_stage(build_wheel())
    assert f"'kfp=={kfp.__version__}' '--no-deps'" in kfp_install  # KFP's own runtime first
    assert command[3 : 3 + len(stage)] == stage  # then this trainop, then the component
    assert "ephemeral_component.py" in command[3 + len(stage) + 2]
    assert "trainop" not in kfp_install
    text = " ".join(command)  # trainop is only ever installed from the wheel's own directory
    assert (
        text.count("trainop==")
        == text.count('--no-index --no-deps --find-links "$wheels" trainop==')
        == 1
    )


def test_by_default_no_requirement_is_given_and_only_constants_names_the_image() -> None:
    assert PACKAGE == ""  # TRAINOP_KFP_PACKAGE is not set here
    sources = (HERE.parents[1] / "integrations" / "kfp" / "trainop_kfp").glob("*.py")
    naming = sorted(p.name for p in sources if "python:3" in p.read_text())
    assert naming == ["constants.py"]


_COMPILE_WITH_A_REQUIREMENT = """
import sys, yaml
from kfp import compiler
from trainop_kfp import trainop_run
compiler.Compiler().compile(trainop_run, package_path=sys.argv[1])
(executor,) = yaml.safe_load(open(sys.argv[1]))["deploymentSpec"]["executors"].values()
print(yaml.safe_dump(executor["container"]["command"]))
"""


def test_a_requirement_given_at_compile_time_is_installed_instead_of_the_wheel(
    tmp_path: Path,
) -> None:
    wheel = "trainop @ https://example.org/trainop-0.1.0.dev1-py3-none-any.whl"
    env = {**os.environ, PACKAGE_ENV: wheel}
    code = [sys.executable, "-c", _COMPILE_WITH_A_REQUIREMENT, str(tmp_path / "c.yaml")]
    done = subprocess.run(code, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    command = yaml.safe_load(done.stdout)
    assert f"python3 -m pip install --quiet --no-warn-script-location '{wheel}'" in command[2]
    assert not [part for part in command if "wheels=$(mktemp -d)" in part]  # nothing embedded


def test_the_component_defaults_are_the_documented_constants() -> None:
    parameters = run_training_job.component_spec.inputs

    assert parameters["backend"].default == DEFAULT_BACKEND
    assert parameters["timeout_seconds"].default == DEFAULT_TIMEOUT_SECONDS
    assert trainop_run.component_spec.inputs["backend"].default == DEFAULT_BACKEND
    timeout = trainop_run.component_spec.inputs["timeout_seconds"].default
    assert timeout == DEFAULT_TIMEOUT_SECONDS
