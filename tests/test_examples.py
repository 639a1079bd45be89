"""Every example under examples/ runs to Succeeded on the local backend, through TrainingClient,
and prints what its expectations (tests/examples_support/expectations.py) say it must."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.progress import trainer_status_of

ROOT = Path(__file__).resolve().parents[1]


def _expectations() -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location(
        "expectations", Path(__file__).parent / "examples_support" / "expectations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    examples: dict[str, dict[str, Any]] = module.EXAMPLES
    return examples


EXAMPLES = _expectations()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TrainingClient]:
    client = TrainingClient(LocalBackend(home=tmp_path / "home"))
    yield client
    for job in client.list():
        client.delete(job.name, job.namespace)


def _params() -> list[Any]:
    params = []
    for path in EXAMPLES:
        marks = [pytest.mark.slow]
        if "mxnet" in path:
            marks.append(pytest.mark.mxnet)
        params.append(pytest.param(path, marks=marks, id=f"{path} runs to Succeeded"))
    return params


@pytest.mark.parametrize("example", _params())
def test_example_runs_to_succeeded(
    example: str, client: TrainingClient, request: pytest.FixtureRequest
) -> None:
    expected = EXAMPLES[example]
    if "mxnet" in example:
        request.getfixturevalue("mxnet_venv")

    created = client.create(ROOT / example)
    finished = client.wait(created.name, created.namespace, timeout=expected["timeout_s"])
    logs = list(client.logs(created.name, created.namespace, follow=True))  # until all exit
    text = "\n".join(line.text for line in logs)
    assert is_succeeded(finished), f"{job_state(finished)}: {finished.status}\n{text[-3000:]}"

    replicas = {
        f"{rtype.lower()}-{i}" for rtype, n in expected["replicas"].items() for i in range(n)
    }
    assert {line.replica for line in logs} <= replicas  # some replicas print nothing
    counts = {rtype: spec.replicas for rtype, spec in finished.spec.replica_specs.items()}
    assert counts == expected["replicas"]
    for pattern in expected["must_match"]:
        assert re.search(pattern, text, re.MULTILINE), f"{pattern!r} not in logs:\n{text[-3000:]}"
    if "progress" in expected:  # written by the supervisor when the primary replica ended
        progress = trainer_status_of(client.get(created.name, created.namespace))
        assert progress is not None and progress.progress_percentage == expected["progress"]


def _flaky_attempt(job_dir: Path, env: dict[str, str]) -> int:
    """One attempt of the exit-code example's Worker, as `trainop run` starts it for the job
    whose state directory is `job_dir` (the YAML's env, the job marker, the rendezvous)."""
    replica_env = {
        **os.environ,
        **env,
        "TRAINOP_JOB_DIR": str(job_dir),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",  # a port can come round again: it is no run's identity
        "RANK": "1",
        "WORLD_SIZE": "1",
    }
    done = subprocess.run(
        [sys.executable, "flaky.py", "--fail-rank", "1", "--exit-code", "137"],
        cwd=ROOT / "examples" / "exitcode",
        env=replica_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode


def test_two_runs_of_the_exit_code_example_keep_their_markers_apart(tmp_path: Path) -> None:
    import yaml

    job = yaml.safe_load((ROOT / "examples" / "exitcode" / "retry.yaml").read_text())
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(mode=0o700)
    second.mkdir(mode=0o700)

    assert _flaky_attempt(first, env) == 137  # the first run fails once ...
    assert _flaky_attempt(second, env) == 137  # ... and so does a second, its marker unseen
    assert _flaky_attempt(first, env) == 0  # each run's restart sees its own marker
    assert _flaky_attempt(second, env) == 0
    assert list(first.iterdir()) == list(second.iterdir()) == []  # removed on success


def test_the_exit_code_example_says_what_to_set_without_a_marker_directory() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINOP_JOB_DIR", "FLAKY_MARKER_DIR")}
    done = subprocess.run(
        [sys.executable, "flaky.py"],
        cwd=ROOT / "examples" / "exitcode",
        env={**env, "RANK": "1", "WORLD_SIZE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "set FLAKY_MARKER_DIR" in done.stderr
