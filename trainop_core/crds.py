"""CustomResourceDefinitions generated from the job models, one per kind.

The pydantic models are the single source of the API: their JSON schema (by wire name) is turned
into a Kubernetes *structural* schema (every node typed, no $ref, no nullable anyOf), and the pod
templates get a full schema generated from the Kubernetes field table, as upstream's CRDs have.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

from trainop_core.api.job import GROUP, VERSION
from trainop_core.api.podtemplate import QUANTITY_FIELDS, REQUIRED, ROOT_MODEL, k8s_types

if TYPE_CHECKING:
    from trainop_core.kinds.base import Kind

PRINTER_COLUMNS = (
    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)
_DROPPED = ("title", "default", "description", "additionalProperties", "anyOf", "$ref")
_PRESERVE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_INT_OR_STRING = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_SCALARS = {"str": "string", "int": "integer", "bool": "boolean"}


def crd_for(kind: Kind) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of one kind."""
    names: dict[str, Any] = {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.singular,
    }
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [_version(kind)],
        },
    }


def all_crds(kinds: Iterable[Kind]) -> list[dict[str, Any]]:
    """One CRD per kind of a registry (aliases such as MXNetJob are not separate resources)."""
    return [crd_for(kind) for kind in kinds]


def to_yaml(crds: Iterable[dict[str, Any]]) -> str:
    """A multi-document YAML stream in field order (libyaml when available: CRDs are big)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump_all(list(crds), Dumper=dumper, sort_keys=False, default_flow_style=False)


def _version(kind: Kind) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if kind.scale_replica_type:
        subresources["scale"] = _scale(kind, kind.scale_replica_type)
    return {
        "name": VERSION,
        "served": True,
        "storage": True,
        "additionalPrinterColumns": [*PRINTER_COLUMNS, *kind.extra_printer_columns],
        "schema": {"openAPIV3Schema": job_schema(kind)},
        "subresources": subresources,
    }


def _scale(kind: Kind, rtype: str) -> dict[str, str]:
    return {
        "specReplicasPath": f".spec.{kind.replica_field}.{rtype}.replicas",
        "statusReplicasPath": f".status.replicaStatuses.{rtype}.active",
        "labelSelectorPath": f".status.replicaStatuses.{rtype}.selector",
    }


def job_schema(kind: Kind) -> dict[str, Any]:
    """The structural openAPIV3Schema of a kind's job resource."""
    raw = kind.job_model.model_json_schema(by_alias=True)
    schema = structural(raw, raw.get("$defs", {}))
    # The API server owns ObjectMeta's schema; a CRD may only say it is an object.
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["kind"] = {"type": "string"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    replica = schema["properties"]["spec"]["properties"][kind.replica_field]["additionalProperties"]
    replica["properties"]["template"] = pod_template_schema()
    schema.pop("required", None)  # spec is required by the models, not by the API server
    return schema


def structural(
    node: dict[str, Any], defs: dict[str, Any], *, defaults: bool = False
) -> dict[str, Any]:
    """A pydantic JSON-schema node as a structural schema node (recursive, refs inlined). A
    field's own markers (next to a $ref or an Optional's anyOf) stay on the inlined node; with
    `defaults`, a field's non-null default is kept (the API server then applies it)."""
    marks = _marks(node, defaults)
    if "$ref" in node:
        return structural(defs[node["$ref"].rsplit("/", 1)[-1]], defs, defaults=defaults) | marks
    if "anyOf" in node:
        return _union(node, defs, defaults) | marks
    out = {key: value for key, value in node.items() if key not in _DROPPED} | marks
    out.pop("$defs", None)
    if "properties" in node:
        out["properties"] = {
            k: structural(v, defs, defaults=defaults) for k, v in node["properties"].items()
        }
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = structural(extra, defs, defaults=defaults)
    elif extra is True or (node.get("type") == "object" and "properties" not in node):
        out.update(_PRESERVE)  # free-form data: keep every field
    if "items" in node:
        out["items"] = structural(node["items"], defs, defaults=defaults)
    return out


def _marks(node: dict[str, Any], defaults: bool) -> dict[str, Any]:
    """The keys of `node` itself that survive inlining (its default only if asked for)."""
    if "$ref" not in node and "anyOf" not in node:
        return {"default": node["default"]} if defaults and node.get("default") is not None else {}
    kept = {k: v for k, v in node.items() if k not in (*_DROPPED, "$defs")}
    if defaults and node.get("default") is not None:
        kept["default"] = node["default"]
    return kept


def _union(node: dict[str, Any], defs: dict[str, Any], defaults: bool) -> dict[str, Any]:
    options = [o for o in node["anyOf"] if o.get("type") != "null"]
    if len(options) == 1:
        return structural(options[0], defs, defaults=defaults)  # Optional[X]: absent means unset
    types = {o.get("type") for o in options}
    if types <= {"string", "integer", "number"}:
        return dict(_INT_OR_STRING)  # quantities: 2, 0.5 or "500m"
    return dict(_PRESERVE)


# --- the pod template, from the Kubernetes field table ------------------------------------------


def kubernetes_schema(type_name: str) -> dict[str, Any]:
    """The structural schema of a type of the Kubernetes field table, in its notation
    ("V1EnvVar", "list[V1Toleration]", "dict(str, str)")."""
    return _type_schema(type_name)


def pod_template_schema() -> dict[str, Any]:
    """A structural schema for a V1PodTemplateSpec, with embedded metadata kept free-form."""
    schema = _model_schema(ROOT_MODEL)
    schema["properties"]["metadata"] = dict(_PRESERVE)
    return schema


def _model_schema(model: str) -> dict[str, Any]:
    fields = k8s_types()[model]
    properties = {
        name: _type_schema(type_name, (model, name) in QUANTITY_FIELDS)
        for name, type_name in fields.items()
    }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [*REQUIRED.get(model, ()), *(("containers",) if model == "V1PodSpec" else ())]
    if required:
        schema["required"] = sorted(required)
    return schema


_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")


def _type_schema(type_name: str, quantity: bool = False) -> dict[str, Any]:
    if quantity and not type_name.startswith("dict"):
        return dict(_INT_OR_STRING)
    if match := _LIST.match(type_name):
        return {"type": "array", "items": _type_schema(match.group(1), quantity)}
    if match := _DICT.match(type_name):
        return {"type": "object", "additionalProperties": _type_schema(match.group(1), quantity)}
    if type_name in k8s_types():
        return _model_schema(type_name)
    if type_name == "datetime":
        return {"type": "string", "format": "date-time"}
    if type_name == "object":
        return dict(_INT_OR_STRING)  # the pod's only free-typed fields are IntOrString ports
    return {"type": _SCALARS[type_name]}
