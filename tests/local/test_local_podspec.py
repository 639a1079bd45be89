"""Pod manifest -> processes: pure translation rules of the local backend."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from trainop_core.backends.process.podspec import (
    base_env,
    container_env,
    expand,
    launch_spec,
    local_warnings,
    runnable_problems,
)

LABELS = {
    "training.kubeflow.org/replica-type": "worker",
    "training.kubeflow.org/replica-index": "1",
}


def pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = init
    return {"metadata": {"name": "job-worker-1", "labels": LABELS}, "spec": body}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "a-b"),
        ("$(MISSING) stays", "$(MISSING) stays"),
        ("$$(A) is escaped", "$(A) is escaped"),
        ("cost $5 and $(A", "cost $5 and $(A"),
        ("$$$(A)", "$a"),
    ],
    ids=[
        "known names expand",
        "unknown names stay",
        "$$ escapes",
        "lone dollars stay",
        "escape then expand",
    ],
)
def test_kubernetes_variable_expansion(text: str, expected: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}.get) == expected


def test_env_values_see_only_earlier_entries_and_value_from_is_skipped() -> None:
    container = {
        "env": [
            {"name": "LATER_REF", "value": "$(B)"},
            {"name": "B", "value": "b"},
            {"name": "C", "value": "$(B)-c"},
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
    }
    assert container_env(container, {}) == {"LATER_REF": "$(B)", "B": "b", "C": "b-c"}


def test_downward_api_fields_resolve_to_this_machine(tmp_path: Path) -> None:
    container = {
        "name": "jax",
        "command": ["x"],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "TYPE",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.labels['training.kubeflow.org/replica-type']"
                    }
                },
            },
        ],
    }
    env = launch_spec(pod(container), "jax", {}, str(tmp_path)).main.env
    assert (env["POD_IP"], env["POD"], env["TYPE"]) == ("127.0.0.1", "job-worker-1", "worker")
    specs = {"Worker": {"template": {"spec": {"containers": [container]}}}}
    assert not any("valueFrom" in m for m in local_warnings(specs, "jaxReplicaSpecs", "jax"))


def test_launch_spec_runs_the_default_container_with_expanded_args(tmp_path: Path) -> None:
    sidecar = {"name": "sidecar", "command": ["sleep", "1"]}
    main = {
        "name": "pytorch",
        "command": ["python", "$(SCRIPT)"],
        "args": ["--rank", "$(RANK)"],
        "env": [{"name": "SCRIPT", "value": "train.py"}, {"name": "RANK", "value": "2"}],
    }
    init = [{"name": "prep", "command": ["true"]}]
    spec = launch_spec(
        pod(sidecar, main, init=init, restartPolicy="OnFailure"),
        "pytorch",
        {"HOME": "/h"},
        str(tmp_path),
    )
    assert spec.main.argv == ("python", "train.py", "--rank", "2")
    assert spec.main.env["HOME"] == "/h" and spec.main.env["RANK"] == "2"
    assert [step.container for step in spec.init] == ["prep"]
    assert (spec.replica, spec.restart_policy, spec.main.cwd) == (
        "worker-1",
        "OnFailure",
        str(tmp_path),
    )


def test_working_dir_is_used_only_if_it_exists_here(tmp_path: Path) -> None:
    existing = {"name": "tensorflow", "command": ["x"], "workingDir": str(tmp_path)}
    missing = {"name": "tensorflow", "command": ["x"], "workingDir": "/workspace/nowhere"}
    assert launch_spec(pod(existing), "tensorflow", {}, "/fallback").main.cwd == str(tmp_path)
    assert launch_spec(pod(missing), "tensorflow", {}, "/fallback").main.cwd == "/fallback"


def test_this_interpreter_comes_first_on_path() -> None:
    env = base_env({"PATH": "/usr/bin"})
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/bin"]


def test_containers_without_command_are_named_by_field_path() -> None:
    specs = {
        "Worker": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "side", "image": "x", "command": ["a"]},
                        {"name": "tensorflow", "image": "img"},
                    ],
                    "initContainers": [{"name": "init", "image": "busybox"}],
                }
            }
        }
    }
    problems = runnable_problems(specs, "tfReplicaSpecs", "tensorflow")
    assert [p.path for p in problems] == [
        "spec.tfReplicaSpecs.Worker.template.spec.containers[1].command",
        "spec.tfReplicaSpecs.Worker.template.spec.initContainers[0].command",
    ]
    assert "cannot run the image's entrypoint" in problems[0].message


def test_what_is_ignored_locally_is_said_once_per_kind_of_thing() -> None:
    container = {
        "name": "pytorch",
        "image": "img:1",
        "command": ["a"],
        "envFrom": [{"configMapRef": {"name": "c"}}],
        "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }
    specs = {
        rtype: {"template": {"spec": {"containers": [container]}}} for rtype in ("Master", "Worker")
    }
    messages = local_warnings(specs, "pytorchReplicaSpecs", "pytorch")
    assert len(messages) == 2
    assert messages[0].startswith("image(s) img:1 are not pulled")
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[0] (S)" in messages[1]


@pytest.mark.parametrize(
    ("grace", "expected"),
    [(None, 5.0), (2, 2.0), (2**63 - 1, 30.0)],
    ids=["unset is 5 s", "a short grace is kept", "an int64 grace waits 30 s at most"],
)
def test_the_grace_period_is_bounded_locally(grace: int | None, expected: float) -> None:
    container = {"name": "c", "image": "i", "command": ["true"]}
    spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    assert launch_spec(pod(container, **spec), "c", {}, ".").grace_seconds == expected
