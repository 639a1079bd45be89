"""Pod-template shape checks: the field table, required fields, paths, and the container helpers."""

from __future__ import annotations

import copy
import importlib.util
import inspect
from pathlib import Path
from typing import Any

import pytest

from trainop_core.api import podtemplate
from trainop_core.api.podtemplate import (
    check_template,
    containers,
    default_container,
    find_container,
    k8s_types,
)

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_k8s_types", ROOT / "scripts/gen_k8s_types.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rich_template() -> dict[str, Any]:
    """A template using many pod features, including numeric quantities and IntOrString ports."""
    return {
        "metadata": {"labels": {"app": "mnist"}, "annotations": {"a/b": "c"}},
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "python:3.11",
                    "command": ["python", "-c", "print(1)"],
                    "env": [
                        {"name": "A", "value": "1"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1}},
                    "livenessProbe": {"httpGet": {"port": "http", "path": "/"}},
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                    "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 30,
            "hostNetwork": False,
        },
    }


def test_the_committed_table_matches_the_installed_kubernetes_client() -> None:
    assert k8s_types() == _generator().collect()


def test_the_required_fields_match_what_the_client_refuses_to_leave_unset() -> None:
    import kubernetes.client as k8s

    truth: dict[str, tuple[str, ...]] = {}
    for model in k8s_types():
        cls = getattr(k8s, model)
        required = [
            cls.attribute_map[attr]
            for attr in cls.attribute_map
            if "must not be `None`" in inspect.getsource(getattr(cls, attr).fset)
        ]
        if required:
            truth[model] = tuple(sorted(required))
    # Pod containers are checked by api/validation.py with a friendlier message.
    truth["V1PodSpec"] = tuple(f for f in truth["V1PodSpec"] if f != "containers")
    truth = {k: v for k, v in truth.items() if v}
    assert dict(podtemplate.REQUIRED) == truth


def test_a_rich_valid_template_has_no_problems_and_is_left_untouched() -> None:
    template = rich_template()
    before = copy.deepcopy(template)
    assert check_template(template, "t") == []
    assert template == before


def test_nulls_are_accepted_anywhere_as_kubectl_does() -> None:
    template = {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}
    assert check_template(template, "t") == []


def _with(path: str, value: Any) -> dict[str, Any]:
    template = rich_template()
    *parents, last = path.split(".")
    node: Any = template
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return template


C0 = "t.spec.containers[0]"

BAD = [
    pytest.param(
        "spec.containers.0.imagee",
        "x",
        f"{C0}.imagee",
        'unknown field (did you mean "image"?)',
        id="a misspelt container field is unknown and a close name is suggested",
    ),
    pytest.param(
        "spec.containers.0.ports.0.containerPort",
        "abc",
        f"{C0}.ports[0].containerPort",
        'expected an integer, got "abc"',
        id="a port number given as a word is not an integer",
    ),
    pytest.param(
        "spec.containers.0.env.0.value",
        1,
        f"{C0}.env[0].value",
        "expected a string, got 1",
        id="an env value must be a string as on the API server",
    ),
    pytest.param(
        "spec.containers.0.env.0",
        {"value": "1"},
        f"{C0}.env[0].name",
        "required field is missing",
        id="an env entry without a name is rejected",
    ),
    pytest.param(
        "spec.containers.0.resources.limits.memory",
        "4 GB",
        f"{C0}.resources.limits.memory",
        "expected a quantity",
        id="a quantity with a space is not a Kubernetes quantity",
    ),
    pytest.param(
        "spec.containers.0.command",
        "python train.py",
        f"{C0}.command",
        'expected a list, got "python train.py"',
        id="a command given as one string is not a list",
    ),
    pytest.param(
        "spec.hostNetwork",
        "yes",
        "t.spec.hostNetwork",
        'expected true or false, got "yes"',
        id="a quoted yes is not a boolean",
    ),
    pytest.param(
        "spec.nodeSelector",
        ["linux"],
        "t.spec.nodeSelector",
        "expected a mapping, got a list",
        id="a node selector must be a mapping",
    ),
    pytest.param(
        "metadata.labels.app",
        3,
        "t.metadata.labels.app",
        "expected a string, got 3",
        id="label values must be strings",
    ),
    pytest.param(
        "spec.volumes.0.emptyDir.sizeLimit",
        True,
        "t.spec.volumes[0].emptyDir.sizeLimit",
        "expected a quantity",
        id="a boolean is not a size",
    ),
    pytest.param(
        "spec.terminationGracePeriodSeconds",
        1.5,
        "t.spec.terminationGracePeriodSeconds",
        "expected an integer, got 1.5",
        id="a fraction is not an integer",
    ),
    pytest.param(
        "spec.containers.0.ports.0.containerPort",
        True,
        f"{C0}.ports[0].containerPort",
        "expected an integer, got true",
        id="a boolean is not an integer",
    ),
]


@pytest.mark.parametrize(("path", "value", "where", "fragment"), BAD)
def test_a_bad_value_is_reported_at_its_full_path(
    path: str, value: Any, where: str, fragment: str
) -> None:
    problems = check_template(_with(path, value), "t")
    assert [p.path for p in problems] == [where]
    assert fragment in problems[0].message


def test_map_keys_with_dots_are_bracketed_in_paths() -> None:
    template = rich_template()
    template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "one"
    [problem] = check_template(template, "t")
    assert problem.path == f"{C0}.resources.limits[nvidia.com/gpu]"


def test_every_problem_of_a_template_is_reported_at_once() -> None:
    template = rich_template()
    template["spec"]["containers"][0]["imagee"] = "x"
    template["spec"]["containers"][0]["ports"][0]["containerPort"] = "abc"
    template["spec"]["volumes"][0] = {"emptyDir": {}}
    paths = {p.path for p in check_template(template, "t")}
    assert paths == {f"{C0}.imagee", f"{C0}.ports[0].containerPort", "t.spec.volumes[0].name"}


def _template(*names: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": n, "image": "i"} for n in names]}}


@pytest.mark.parametrize(
    ("names", "wanted", "expected"),
    [
        pytest.param(("side", "pytorch"), "pytorch", "pytorch", id="the named container wins"),
        pytest.param(("main", "side"), "pytorch", "main", id="without it the first is chosen"),
        pytest.param((), "pytorch", None, id="a template without containers has none"),
    ],
)
def test_default_container_picks_by_name_else_the_first(
    names: tuple[str, ...], wanted: str, expected: str | None
) -> None:
    found = default_container(_template(*names), wanted)
    assert (found["name"] if found else None) == expected


def test_find_container_does_not_fall_back_and_containers_tolerates_malformed_templates() -> None:
    assert find_container(_template("main"), "pytorch") is None
    assert containers({"spec": {"containers": "oops"}}) == []
    assert containers({}) == []
    assert [c["name"] for c in containers(_template("a", "b"))] == ["a", "b"]
