"""trainop's Trainer v2 CRDs carry every default and schema constraint of Trainer v2.3's, field by
field: the facts in data/trainer-v2.3-crd-facts.yaml (read from Trainer's own CRDs at v2.3.0,
see the file's header) against what `trainop_core.runtimes.crds` generates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop_core.api.podtemplate import k8s_types
from trainop_core.runtimes.crds import trainer_crds

FACTS = yaml.safe_load((Path(__file__).parent / "data" / "trainer-v2.3-crd-facts.yaml").read_text())
KINDS = list(FACTS["kinds"])
KEYWORDS = (
    "type", "format", "default", "enum", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "pattern", "minLength", "maxLength", "minItems", "maxItems",
    "minProperties", "maxProperties", "required", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
)  # fmt: skip
# Fields trainop's CRDs have beyond Trainer's, and why.
TRAINOP_ONLY = {
    "status.plannerStatus": "the planner's record of the run, kept by trainop's operator",
    "spec.mlPolicy.torch.numProcPerNode": "Trainer v2.0/v2.1 runtimes' count, still honoured",
}
# Where Trainer embeds a Kubernetes type trainop's field table does not hold: trainop keeps what
# is written there (a JobSpec's pod template is typed; see runtimes/crds.py).
KEPT_AS_WRITTEN = {"batch/v1 JobSpec", "PersistentVolumeClaimStatus"}


def crds() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in trainer_crds()}


def facts_of(kind: str) -> dict[str, Any]:
    facts = FACTS["kinds"][kind]
    return facts | {k: v for k, v in FACTS["kinds"].get(facts.get("sameSchemaAs"), {}).items()
                    if k in ("fields", "embedded", "excluded")}  # fmt: skip


def walk(node: dict[str, Any], path: str, skip: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, the node's constraining keywords) for every node, not descending into `skip`."""
    if path in skip:
        return
    found = {k: node[k] for k in KEYWORDS if k in node}
    if "required" in found:
        found["required"] = sorted(found["required"])  # a set: controller-gen sorts it
    yield path or ".", found
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}" if path else name, skip)
    if "items" in node:
        yield from walk(node["items"], f"{path}[]", skip)
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}", skip)


def node_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for step in path.replace("[]", ".[]").replace("{}", ".{}").split("."):
        key = {"[]": "items", "{}": "additionalProperties"}.get(step)
        node = node[key] if key else node["properties"][step]
    return node


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def ours(kind: str) -> dict[str, dict[str, Any]]:
    facts = facts_of(kind)
    skip = {*facts["embedded"], *facts.get("excluded", {})}
    return dict(walk(schema_of(kind), "", skip))


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_of_trainers_crd_has_its_defaults_and_constraints_here(kind: str) -> None:
    expected, found = facts_of(kind)["fields"], ours(kind)
    missing = sorted(set(expected) - set(found))
    assert not missing, f"fields of Trainer's {kind} absent here: {missing}"
    differing = {
        path: {"trainer": expected[path], "trainop": found[path]}
        for path in expected
        if found[path] != expected[path]
    }
    assert not differing, yaml.safe_dump(differing, width=200)


@pytest.mark.parametrize("kind", KINDS)
def test_fields_here_beyond_trainers_are_the_listed_ones(kind: str) -> None:
    extra = set(ours(kind)) - set(facts_of(kind)["fields"])
    assert extra <= set(TRAINOP_ONLY), sorted(extra - set(TRAINOP_ONLY))


@pytest.mark.parametrize("kind", KINDS)
def test_kubernetes_types_sit_where_trainer_embeds_them(kind: str) -> None:
    schema = schema_of(kind)
    for path, type_name in facts_of(kind)["embedded"].items():
        node = node_at(schema, path)
        assert node["type"] == "object", path
        if type_name == "ObjectMeta":
            assert sorted(node["properties"]) == FACTS["embedded_metadata"], path
        elif type_name in KEPT_AS_WRITTEN:
            assert node.get("x-kubernetes-preserve-unknown-fields") is True, path
        else:
            assert set(node["properties"]) == set(k8s_types()[f"V1{type_name}"]), path


@pytest.mark.parametrize("kind", KINDS)
def test_names_scope_printer_columns_and_subresources_are_trainers(kind: str) -> None:
    crd, facts = crds()[kind], facts_of(kind)
    [version] = crd["spec"]["versions"]
    printed = version.get("additionalPrinterColumns", [])
    columns = [[c["name"], c["type"], c["jsonPath"]] for c in printed]
    assert crd["spec"]["names"]["plural"] == facts["plural"]
    assert crd["spec"]["scope"] == facts["scope"]
    assert columns == facts["printerColumns"]
    assert sorted(version.get("subresources", {})) == facts["subresources"]
    assert (crd["spec"]["group"], version["name"]) == ("trainer.kubeflow.org", "v1alpha1")


def test_the_comparison_sees_a_missing_default() -> None:
    # The check above is only as good as its walk: a default dropped from the model must show.
    found = ours("TrainJob")
    assert found["spec.runtimeRef.apiGroup"]["default"] == "trainer.kubeflow.org"
    assert found["spec.runtimeRef.kind"]["default"] == "ClusterTrainingRuntime"
    found["spec.runtimeRef.kind"].pop("default")
    assert found["spec.runtimeRef.kind"] != facts_of("TrainJob")["fields"]["spec.runtimeRef.kind"]
