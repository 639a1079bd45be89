"""The ``scale`` subresource of custom resources (``autoscaling/v1`` ``Scale``)."""

from __future__ import annotations

from typing import Any

from . import errors
from .events import Obj
from .resources import ResourceType


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def set_path(obj: Obj, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def read_scale(rt: ResourceType, obj: Obj) -> Obj:
    """The ``Scale`` view of ``obj`` through the CRD's replica paths."""
    assert rt.scale is not None  # routing only serves "scale" where declared
    meta = obj["metadata"]
    status: dict[str, Any] = {"replicas": get_path(obj, rt.scale.status_replicas_path) or 0}
    if rt.scale.label_selector_path:
        selector = get_path(obj, rt.scale.label_selector_path)
        if selector:
            status["selector"] = selector
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": get_path(obj, rt.scale.spec_replicas_path) or 0},
        "status": status,
    }


def write_scale(rt: ResourceType, obj: Obj, scale: Any) -> Obj:
    """``obj`` (a private copy) with ``spec.replicas`` of ``scale`` written to its path."""
    assert rt.scale is not None
    if not isinstance(scale, dict):
        raise errors.bad_request("the body must be a Scale object")
    name = obj["metadata"]["name"]
    want_rv = (scale.get("metadata") or {}).get("resourceVersion")
    if want_rv and want_rv != obj["metadata"]["resourceVersion"]:
        raise errors.conflict(rt.plural, name, errors.STALE, rt.group)
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise errors.invalid("Scale", name, [("spec.replicas", "Invalid value: must be >= 0")])
    set_path(obj, rt.scale.spec_replicas_path, replicas)
    return obj
