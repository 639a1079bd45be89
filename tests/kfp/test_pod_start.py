"""What a pipeline pod does when it starts, run for real: the compiled component's command in a
fresh virtual environment that holds nothing but what that command installs.

pip there may not ask any package index (PIP_NO_INDEX): trainop's third-party requirements and
kfp come from a local wheelhouse, built once per machine at the versions constraints.txt pins (as
a pod would get them from its index), and trainop itself can only come from the command.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import json
import lzma
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import kfp
import pytest
import yaml
from builders import make_job
from kfp import compiler
from trainop_kfp import trainop_run
from trainop_kfp.wheel import CHUNK, Wheel, build_wheel, install_stage, runtime_requirements

import trainop_core
from trainop_core.testing.binaries import cache_dir

REPO = Path(__file__).resolve().parents[2]
MAX_ARGUMENT = 131072  # Linux's MAX_ARG_STRLEN: execve refuses a longer single argument


def executor_container(component: Any, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(component, package_path=str(path))
    (executor,) = yaml.safe_load(path.read_text())["deploymentSpec"]["executors"].values()
    container: dict[str, Any] = executor["container"]
    return container


def wheelhouse() -> Path:
    """trainop's requirements outside its extras (with their own) and kfp's runtime, as wheels
    at the versions constraints.txt pins; built once per machine and then only read."""
    constraints = REPO / "constraints.txt"
    requirements = runtime_requirements()
    recipe = [requirements, kfp.__version__, constraints.read_text(), sys.version, sys.platform]
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:12]
    target = cache_dir() / "kfp-wheelhouse" / key
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=target.parent))
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(staging)]
    for command in (
        [*pip, "--constraint", str(constraints), *requirements],
        [*pip, "--no-deps", f"kfp=={kfp.__version__}"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"cannot build the wheelhouse: {done.stderr[-2000:]}"
    try:
        os.rename(staging, target)
    except OSError:  # another run built it meanwhile
        shutil.rmtree(staging)
    return target


def pod_environment(tmp_path: Path, venv: Path) -> dict[str, str]:
    """What a pod's shell has: the image's python3 first on PATH (here the fresh venv's), no
    PYTHONPATH, and a pip that can reach only the wheelhouse."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        "TRAINOP_HOME": str(tmp_path / "trainop-home"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse()),
        "PIP_CONFIG_FILE": os.devnull,
    }


@pytest.mark.slow
def test_a_pod_installs_the_trainop_its_command_carries_and_runs_the_step(
    tmp_path: Path,
) -> None:
    container = executor_container(trainop_run, tmp_path)
    venv = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = pod_environment(tmp_path, venv)
    code = "import trainop_core; print('replica ran with', trainop_core.__file__)"
    job = make_job("PyTorchJob", "pod-start").master(
        command=["python3", "-c", code], restart_policy="Never"
    )
    executor_input = {
        "inputs": {
            "parameterValues": {"job_yaml": yaml.safe_dump(job.build()), "backend": "local"}
        },
        "outputs": {"outputFile": str(tmp_path / "executor-output.json")},
    }
    given = json.dumps(executor_input)
    args = [given if arg == "{{$}}" else arg for arg in container["args"]]

    pod = subprocess.run(
        [*container["command"], *args], env=env, capture_output=True, text=True, timeout=600
    )

    output = pod.stdout + pod.stderr
    assert pod.returncode == 0, output[-4000:]
    installed = str(venv / "lib")  # the replica imported the trainop the command installed
    assert f"master-0 | replica ran with {installed}" in output, output[-4000:]
    show = "import trainop_core; print(trainop_core.__version__)"
    version = subprocess.run(
        [str(venv / "bin" / "python3"), "-c", show], env=env, capture_output=True, text=True
    )
    assert version.stdout.strip() == trainop_core.__version__, version.stderr


def test_no_component_names_trainop_for_a_package_index(tmp_path: Path) -> None:
    command = " ".join(executor_container(trainop_run, tmp_path)["command"])

    # The one pip install naming trainop may look only in the directory the wheel is written to.
    pinned = f'--no-index --no-deps --find-links "$wheels" trainop=={trainop_core.__version__}\n'
    assert command.count("trainop==") == command.count(pinned) == 1


def test_every_argument_of_the_command_fits_what_execve_takes(tmp_path: Path) -> None:
    command = executor_container(trainop_run, tmp_path)["command"]

    assert max(len(part.encode()) for part in command) < MAX_ARGUMENT
    assert CHUNK < MAX_ARGUMENT


def test_the_wheel_is_this_trainop_with_its_own_requirements_outside_the_extras() -> None:
    wheel = build_wheel()
    with zipfile.ZipFile(io.BytesIO(wheel.data)) as archive:
        names = archive.namelist()
        dist_info = f"trainop-{trainop_core.__version__}.dist-info"
        metadata = HeaderParser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        record = archive.read(f"{dist_info}/RECORD").decode()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    installed_entry_points = importlib.metadata.distribution("trainop").read_text(
        "entry_points.txt"
    )

    declared = importlib.metadata.requires("trainop") or []
    runtime = [r for r in declared if "extra ==" not in r]
    assert metadata.get_all("Requires-Dist") == runtime
    assert metadata["Version"] == trainop_core.__version__
    for package in ("trainop_core", "trainop_kfp", "trainop_flyte", "trainop_hpo"):
        assert f"{package}/__init__.py" in names and f"{package}/py.typed" in names
    assert "trainop_core/api/k8s_types.json" in names and entry_points == installed_entry_points
    assert all(shlex.quote(r) in install_stage(wheel)[2] for r in runtime)  # named in the command
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert all(f"{name}," in record for name in names)
    assert wheel.data == build_wheel.__wrapped__().data  # the same sources, the same bytes


DAMAGES = {
    "other bytes": base64.b64encode(lzma.compress(b"other bytes")).decode(),
    "truncated": base64.b64encode(lzma.compress(b"the real bytes")).decode()[:-8],
    "not base64": "%%%",
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_wheel_stops_the_step_before_anything_is_installed(damage: str) -> None:
    stage = install_stage(Wheel("trainop-0.0.0-py3-none-any.whl", b"the real bytes"))
    assert len(stage) == 5  # sh -c SCRIPT sh CHUNK: one chunk
    damaged = [*stage[:4], DAMAGES[damage], "sh", "-c", "echo the step ran"]

    done = subprocess.run(damaged, capture_output=True, text=True, timeout=60)

    assert done.returncode != 0
    assert (
        done.stderr.strip() == "the trainop wheel in this command is damaged: its SHA-256 differs"
    )
    assert "the step ran" not in done.stdout
