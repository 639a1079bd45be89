"""Undo KFP's ints-become-floats in dict parameters, guided by the job's own schema.

KFP passes `dict` parameters as protobuf Structs, which hold every number as a double: a job's
`replicas: 2` arrives as `2.0`, and trainop's strict loading rightly refuses a float where the
API wants an integer. Only fields the job model (or the Kubernetes pod-template table) types as
integers are turned back into ints, and only when the value is integral; a float field such as
`lr: 1.0`, or text like `--lr 1.0` inside `args`, is left as it is.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from trainop_core.api import trainjob as v2
from trainop_core.api.podtemplate import QUANTITY_FIELDS, ROOT_MODEL, k8s_types
from trainop_core.api.types import ReplicaSpec

# Model fields holding plain data that the Kubernetes field table describes instead.
_K8S_FIELDS: Mapping[tuple[type[BaseModel], str], str] = {
    (ReplicaSpec, "template"): ROOT_MODEL,
    (v2.Trainer, "env"): "list[V1EnvVar]",
    (v2.Trainer, "resources_per_node"): "V1ResourceRequirements",
}
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")


def coerce_ints(data: Any, model: type[BaseModel]) -> Any:
    """A copy of `data` (wire form) with integral floats turned into ints wherever `model` (a
    pydantic model such as a kind's job model) expects an int. Pure; unknown fields are kept."""
    return _model(data, model)


def coerce_k8s(data: Any, type_name: str) -> Any:
    """`coerce_ints` for a Kubernetes object the field table names (e.g. "V1PodSpec"). Pure."""
    return _k8s(data, type_name, quantity=False)


def _model(data: Any, model: type[BaseModel]) -> Any:
    if not isinstance(data, Mapping):
        return data
    fields = _wire_fields(model)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = fields.get(key)
        if name is None:
            out[key] = value
        elif (k8s := _k8s_root(model, name)) is not None:
            out[key] = _k8s(value, k8s, quantity=False)
        else:
            out[key] = _typed(value, model.model_fields[name].annotation)
    return out


def _wire_fields(model: type[BaseModel]) -> dict[str, str]:
    """Wire key (alias, or the name itself) -> field name."""
    fields: dict[str, str] = {}
    for name, info in model.model_fields.items():
        fields[name] = name
        if info.alias:
            fields[info.alias] = name
    return fields


def _k8s_root(model: type[BaseModel], name: str) -> str | None:
    for (owner, field), root in _K8S_FIELDS.items():
        if issubclass(model, owner) and field == name:
            return root
    return None


def _typed(value: Any, annotation: Any) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _typed(value, args[0])
    if origin in (typing.Union, types.UnionType):
        return _union(value, args)
    if annotation is int:
        return _integral(value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(value, annotation)
    if origin in (dict, Mapping) and isinstance(value, Mapping) and len(args) == 2:
        return {key: _typed(item, args[1]) for key, item in value.items()}
    if origin is list and isinstance(value, list) and args:
        return [_typed(item, args[0]) for item in value]
    return value


def _union(value: Any, members: tuple[Any, ...]) -> Any:
    if float in members:
        return value  # a float is a valid value as it is
    for member in members:
        if member is type(None):
            continue
        coerced = _typed(value, member)
        if coerced is not value:
            return coerced
    return value


def _k8s(value: Any, type_name: str, quantity: bool) -> Any:
    if match := _LIST.match(type_name):
        items = value if isinstance(value, list) else None
        return value if items is None else [_k8s(v, match.group(1), quantity) for v in items]
    if match := _DICT.match(type_name):
        if not isinstance(value, Mapping):
            return value
        return {key: _k8s(item, match.group(1), quantity) for key, item in value.items()}
    table = k8s_types()
    if type_name in table:
        if not isinstance(value, Mapping):
            return value
        fields = table[type_name]
        return {
            key: _k8s(item, fields[key], (type_name, key) in QUANTITY_FIELDS)
            if key in fields
            else item
            for key, item in value.items()
        }
    # int fields, IntOrString ("object": ports) and quantities (`cpu: 2`) are never fractional
    # when they came in as integers, so an integral float is put back as an int.
    if type_name in ("int", "object") or quantity:
        return _integral(value)
    return value


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
