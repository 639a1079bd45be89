"""Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch.

Strategic merge is the subset operators and ``kubectl apply`` use on core types: maps merge
recursively, ``null`` deletes, lists named in :data:`MERGE_KEYS` merge item-by-item on their
key, ``finalizers`` merge as a set, ``$patch: delete|replace`` and
``$deleteFromPrimitiveList/<field>`` are honoured, ``$setElementOrder/`` and ``$retainKeys``
are accepted and ignored. Other lists are replaced.
"""

from __future__ import annotations

import copy
from typing import Any

from . import errors

MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
}
SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    current = doc
    for part in parts[:-1]:
        if isinstance(current, list):
            current = current[_index(current, part, False)]
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise errors.invalid("Patch", "", [("/" + "/".join(parts), "path does not exist")])
    return current


def _index(container: list[Any], part: str, adding: bool) -> int:
    if adding and part == "-":
        return len(container)
    try:
        index = int(part)
    except ValueError:
        raise errors.invalid("Patch", "", [(part, "invalid array index")]) from None
    if not 0 <= index <= len(container) - (0 if adding else 1):
        raise errors.invalid("Patch", "", [(part, "array index out of range")])
    return index


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    if isinstance(parent, list):
        return parent[_index(parent, parts[-1], False)]
    if not isinstance(parent, dict) or parts[-1] not in parent:
        raise errors.invalid("Patch", "", [("/" + "/".join(parts), "path does not exist")])
    return parent[parts[-1]]


def _remove(doc: Any, parts: list[str]) -> Any:
    value = _get(doc, parts)
    parent = _parent(doc, parts)
    if isinstance(parent, list):
        parent.pop(_index(parent, parts[-1], False))
    else:
        del parent[parts[-1]]
    return value


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    if isinstance(parent, list):
        parent.insert(_index(parent, parts[-1], True), value)
    elif isinstance(parent, dict):
        parent[parts[-1]] = value
    else:
        raise errors.invalid("Patch", "", [("/" + "/".join(parts), "parent is not a container")])
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 on a private copy; failures (including ``test``) are 422 Invalid."""
    if not isinstance(operations, list):
        raise errors.bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _get(doc, parts)
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = _remove(doc, source) if kind == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _get(doc, parts) != op.get("value"):
                raise errors.invalid("Patch", "", [(op.get("path", ""), "test operation failed")])
        else:
            raise errors.bad_request(f"unknown json patch operation {kind!r}")
    return doc


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge of ``patch`` into ``target`` (see the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$") or key.startswith("$setElementOrder/"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(field: str, existing: Any, patch: list[Any]) -> list[Any]:
    current: list[Any] = existing if isinstance(existing, list) else []
    if field in SET_LISTS:
        return current + [v for v in patch if v not in current]
    merge_key = MERGE_KEYS.get(field)
    if field == "ports":
        merge_key = "containerPort" if any("containerPort" in p for p in patch) else "port"
    if merge_key is None or not all(isinstance(p, dict) for p in patch):
        return copy.deepcopy(patch)
    result = [copy.deepcopy(item) for item in current]
    for item in patch:
        index = next(
            (i for i, c in enumerate(result) if c.get(merge_key) == item.get(merge_key)), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result
