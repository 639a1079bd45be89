"""CRDs generated from the models: golden files, structural-schema rules, apiextensions validity."""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no types-jsonschema installed
import kubernetes_validate
import pytest
from builders import minimal_job

from trainop_core.crds import all_crds, crd_for, to_yaml
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "crds"
KUBERNETES_VERSION = "1.30"


def _crds(registry: KindRegistry) -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in all_crds(registry.kinds)}


def test_each_crd_matches_its_golden_file(registry: KindRegistry) -> None:
    update = os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1"
    for crd in all_crds(registry.kinds):
        path = GOLDEN / f"{crd['metadata']['name']}.yaml"
        text = to_yaml([crd])
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} is stale: rerun with TRAINOP_UPDATE_GOLDEN=1"


def test_there_is_one_crd_per_kind_and_none_for_aliases(registry: KindRegistry) -> None:
    names = [crd["metadata"]["name"] for crd in all_crds(registry.kinds)]
    assert "mxjobs.kubeflow.org" in names
    assert not any("mxnet" in n for n in names)
    assert len(names) == len(set(names)) == len(registry.kinds)


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")


@functools.cache
def _validator(kind: Kind) -> jsonschema.Draft7Validator:
    # Building a validator checks the (large) schema itself; do it once per kind.
    return jsonschema.Draft7Validator(_schema(crd_for(kind)))


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("kind_name", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
def test_the_schema_is_structural(kinds: dict[str, Kind], kind_name: str) -> None:
    for path, node in _nodes(_schema(crd_for(kinds[kind_name]))):
        assert "$ref" not in node and "$defs" not in node, path
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        assert "type" in node or int_or_string, f"{path} has no type"
        if "anyOf" in node:
            assert int_or_string, f"{path}: only int-or-string may use anyOf"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("type") != "null", path


@pytest.mark.parametrize("kind_name", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
def test_each_crd_is_a_valid_apiextensions_v1_object(
    kinds: dict[str, Kind], kind_name: str
) -> None:
    kubernetes_validate.validate(crd_for(kinds[kind_name]), KUBERNETES_VERSION, strict=True)


def test_the_apiextensions_check_does_catch_a_broken_crd(kinds: dict[str, Kind]) -> None:
    broken = copy.deepcopy(crd_for(kinds["TFJob"]))
    broken["spec"]["versions"][0]["served"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_names_scope_and_version_follow_upstream(kinds: dict[str, Kind]) -> None:
    crd = crd_for(kinds["PyTorchJob"])
    assert crd["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    assert crd["spec"]["names"] == {
        "kind": "PyTorchJob",
        "listKind": "PyTorchJobList",
        "plural": "pytorchjobs",
        "singular": "pytorchjob",
    }
    assert (crd["spec"]["group"], crd["spec"]["scope"]) == ("kubeflow.org", "Namespaced")
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)


def test_printer_columns_show_the_last_condition_and_the_age(kinds: dict[str, Kind]) -> None:
    columns = crd_for(kinds["TFJob"])["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns[:2]] == [
        ("State", ".status.conditions[-1:].type"),
        ("Age", ".metadata.creationTimestamp"),
    ]


@pytest.mark.parametrize("kind_name", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
def test_a_scale_subresource_exists_only_where_the_kind_names_one(
    kinds: dict[str, Kind], kind_name: str
) -> None:
    kind = kinds[kind_name]
    subresources = crd_for(kind)["spec"]["versions"][0]["subresources"]
    assert subresources["status"] == {}
    if kind.scale_replica_type is None:
        assert "scale" not in subresources
        return
    rtype = kind.scale_replica_type
    assert subresources["scale"] == {
        "specReplicasPath": f".spec.{kind.replica_field}.{rtype}.replicas",
        "statusReplicasPath": f".status.replicaStatuses.{rtype}.active",
        "labelSelectorPath": f".status.replicaStatuses.{rtype}.selector",
    }


def test_pytorchjob_scales_its_workers_like_upstream(kinds: dict[str, Kind]) -> None:
    scale = crd_for(kinds["PyTorchJob"])["spec"]["versions"][0]["subresources"]["scale"]
    assert scale["specReplicasPath"] == ".spec.pytorchReplicaSpecs.Worker.replicas"


def _rich(kind_name: str) -> dict[str, Any]:
    env = [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    probe = {"httpGet": {"port": "http", "path": "/"}}
    resources = {"limits": {"cpu": 2, "memory": "4Gi"}}
    builder = minimal_job(kind_name).run_policy(
        cleanPodPolicy="All", schedulingPolicy={"minResources": {"cpu": "1"}}
    )
    builder.container("Worker", env=env, livenessProbe=probe, resources=resources)
    return builder.set("metadata.labels", {"a": "b"}).build()


@pytest.mark.parametrize("kind_name", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
def test_jobs_the_loader_accepts_match_the_crd_schema(
    kinds: dict[str, Kind], kind_name: str
) -> None:
    _validator(kinds[kind_name]).validate(_rich(kind_name))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("spec.runPolicy.cleanPodPolicy", "Sometimes", id="an unknown enum value"),
        pytest.param("spec.runPolicy.backoffLimit", -1, id="a negative backoff limit"),
        pytest.param("spec.pytorchReplicaSpecs.Worker.replicas", "2", id="replicas as a string"),
        pytest.param(
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            [{"image": "x"}],
            id="a container without a name",
        ),
    ],
)
def test_the_crd_schema_rejects_what_the_loader_rejects(
    kinds: dict[str, Kind], path: str, value: Any
) -> None:
    job = minimal_job("PyTorchJob").set(path, value).build()
    with pytest.raises(jsonschema.ValidationError):
        _validator(kinds["PyTorchJob"]).validate(job)
