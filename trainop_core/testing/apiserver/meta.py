"""Pure object-metadata rules: names, defaults, validation, and what an update may change.

Nothing here touches the store; functions take the old object (if any) and the request body
and return a new dict or raise :class:`ApiError`. The store assigns resourceVersion.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from datetime import datetime, timezone
from typing import Any

from . import errors
from .resources import ResourceType
from .validation import validate_kind

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_RULES = {
    "subdomain": (_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"),
    "label": (_LABEL, 63, "a lowercase RFC 1123 label"),
    "label1035": (_LABEL1035, 63, "a DNS-1035 label"),
}
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate_name(prefix: str) -> str:
    return prefix + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))


def name_problems(rt: ResourceType, name: Any) -> list[tuple[str, str]]:
    pattern, max_len, what = _NAME_RULES[rt.name_rule]
    if not isinstance(name, str):
        return [("metadata.name", "Invalid value: must be a string")]
    if not name:
        return [("metadata.name", "Required value: name or generateName is required")]
    if len(name) > max_len or not pattern.match(name):
        return [("metadata.name", f'Invalid value: "{name}": must be {what}')]
    return []


def _label_problems(labels: Any) -> list[tuple[str, str]]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [("metadata.labels", "Invalid value: must be a map of strings")]
    problems = []
    for key, value in labels.items():
        name = key.rsplit("/", 1)[-1]
        if not _LABEL_VALUE.match(name) or not name or len(name) > 63:
            problems.append(("metadata.labels", f'Invalid value: "{key}": invalid label key'))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(("metadata.labels", f'Invalid value: "{value}": invalid label value'))
    return problems


def validate(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise 422 Invalid when ``obj`` breaks metadata rules or its kind's rules."""
    meta = obj["metadata"]
    name = meta.get("name", "")
    problems = name_problems(rt, name) + _label_problems(meta.get("labels"))
    annotations = meta.get("annotations")
    if annotations is not None and not all(isinstance(v, str) for v in annotations.values()):
        problems.append(("metadata.annotations", "Invalid value: values must be strings"))
    problems += validate_kind(rt, obj, old)
    if problems:
        raise errors.invalid(rt.kind, name, problems, rt.group)


def _check_type_meta(rt: ResourceType, body: dict[str, Any]) -> None:
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version and api_version != rt.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )


def _check_namespace(rt: ResourceType, namespace: str, meta: dict[str, Any]) -> None:
    body_ns = meta.get("namespace")
    if rt.namespaced:
        if body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)


def prepare_create(rt: ResourceType, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """A new object from a create body (name may still need generating; not validated)."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        raise errors.bad_request("the request body must be a JSON object")
    _check_type_meta(rt, body)
    obj = copy.deepcopy(body)
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
    meta = obj.setdefault("metadata", {})
    _check_namespace(rt, namespace, meta)
    for key in (*SERVER_META, "resourceVersion", "generation", "selfLink", "managedFields"):
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_iso()
    if rt.tracks_generation:
        meta["generation"] = 1
    if rt.has_status and rt.custom:
        obj.pop("status", None)
    return obj


def prepare_update(
    rt: ResourceType, old: dict[str, Any], body: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """The object after an update of ``old`` with ``body`` through ``subresource``.

    Raises 409 Conflict on a stale ``resourceVersion`` or ``uid`` and 400 on a renamed object.
    With a status subresource the main resource keeps the old status and ``/status`` keeps
    everything but status; ``generation`` is bumped when anything outside metadata (and status,
    when it is a subresource) changed.
    """
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        raise errors.bad_request("the request body must be a JSON object")
    _check_type_meta(rt, body)
    old_meta, meta = old["metadata"], dict(body.get("metadata") or {})
    name = old_meta["name"]
    if meta.get("name", name) != name:
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({name})"
        )
    if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
        raise errors.conflict(rt.plural, name, errors.STALE, rt.group)
    if meta.get("uid") and meta["uid"] != old_meta["uid"]:
        raise errors.conflict(
            rt.plural,
            name,
            f"Precondition failed: UID in precondition: {meta['uid']}, "
            f"UID in object meta: {old_meta['uid']}",
            rt.group,
        )
    if subresource == "status":
        new = copy.deepcopy(old)
        if "status" in body:
            new["status"] = copy.deepcopy(body["status"])
        else:
            new.pop("status", None)
        return new
    new = copy.deepcopy(body)
    new["apiVersion"], new["kind"] = rt.api_version, rt.kind
    new_meta = new.setdefault("metadata", {})
    for key in ("name", "namespace", *SERVER_META, "resourceVersion", "generation"):
        if key in old_meta:
            new_meta[key] = old_meta[key]
        else:
            new_meta.pop(key, None)
    new_meta.pop("managedFields", None)
    if rt.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    return new


def spec_changed(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` differs from ``old`` outside metadata (and status if a subresource)."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rt.has_status else set())
    keys = (set(old) | set(new)) - skip
    return any(old.get(k) != new.get(k) for k in keys)


def same_content(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether an update is a no-op (ignoring resourceVersion), as the server detects."""
    old_meta = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
    new_meta = {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}
    if old_meta != new_meta:
        return False
    return {k: v for k, v in old.items() if k != "metadata"} == {
        k: v for k, v in new.items() if k != "metadata"
    }


def check_preconditions(rt: ResourceType, obj: dict[str, Any], pre: dict[str, Any]) -> None:
    """409 Conflict when delete preconditions (uid, resourceVersion) do not hold."""
    for field in ("uid", "resourceVersion"):
        want, have = pre.get(field), obj["metadata"].get(field)
        if want and want != have:
            raise errors.conflict(
                rt.plural,
                obj["metadata"]["name"],
                f"Precondition failed: {field} in precondition: {want}, "
                f"{field} in object meta: {have}",
                rt.group,
            )
