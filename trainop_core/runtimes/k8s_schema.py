"""Structural schemas of the k8s.io/api types Trainer's CRDs embed, as controller-gen writes them.

Built from trainop_core/api/k8s_openapi.json (Kubernetes' own OpenAPI documents, reduced by
scripts/gen_k8s_openapi.py), so a runtime's JobSpec, pod template and PVC templates are pruned and
defaulted by the API server as Trainer's CRDs have them. controller-gen differs from the
published documents in a few ways, applied here: embedded ObjectMeta keeps only name, namespace,
labels, annotations and finalizers; a Quantity or IntOrString is `x-kubernetes-int-or-string`;
a struct's zero value is no default.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
EMBEDDED_METADATA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "annotations": _STRINGS,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "labels": _STRINGS,
        "name": {"type": "string"},
        "namespace": {"type": "string"},
    },
}
_INT_OR_STRING = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
# resource.Quantity's canonical form, the pattern controller-gen puts on every Quantity
_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_SPECIAL: dict[str, dict[str, Any]] = {
    "meta.v1.ObjectMeta": EMBEDDED_METADATA,
    "api.resource.Quantity": _INT_OR_STRING | {"pattern": _QUANTITY_PATTERN},
    "util.intstr.IntOrString": _INT_OR_STRING,
}


@cache
def _table() -> dict[str, dict[str, Any]]:
    text = resources.files("trainop_core.api").joinpath("k8s_openapi.json").read_text()
    table: dict[str, dict[str, Any]] = json.loads(text)
    return table


def kube_schema(type_name: str) -> dict[str, Any]:
    """The schema of one k8s.io/api type, e.g. `core.v1.PodSpec` or `batch.v1.JobSpec`."""
    if type_name in _SPECIAL:
        return copy.deepcopy(_SPECIAL[type_name])
    return _node(_table()[type_name])


def _node(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if k not in ("ref", "items", "properties", "oneOf")}
    out.pop("additionalProperties", None)
    if "ref" in data:
        out = kube_schema(data["ref"]) | out
    if isinstance(out.get("default"), dict):
        out.pop("default")  # a struct's zero value: controller-gen writes none
    if "items" in data:
        out["items"] = _node(data["items"])
    if "additionalProperties" in data:
        out["additionalProperties"] = _node(data["additionalProperties"])
    if "properties" in data:
        out["properties"] = {k: _node(v) for k, v in data["properties"].items()}
    return out
