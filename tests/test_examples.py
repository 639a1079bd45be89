"""Every example under examples/ runs to Succeeded on the local backend, through TrainingClient,
and prints what its expectations (tests/examples_support/expectations.py) say it must."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient, is_succeeded, job_state

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
    for leftover in expected.get("cleanup", []):
        shutil.rmtree(leftover, ignore_errors=True)

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
