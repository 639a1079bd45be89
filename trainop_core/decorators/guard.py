"""Applying a decorator server's JSON Patch to a pod, and refusing what it may not change.

What a patch may not touch (compared before and after, whatever operations it used): the pod's
identity (apiVersion, kind, name, namespace, owner references, the operator's labels and the
gang-scheduling labels and annotations), its restart policy (the operator's restart logic
depends on it), its containers (a patch may add some, and change theirs, but not remove one) and
the env the job and its env contract set (a patch may add variables, never change, remove or
shadow one that was there). The patched pod must still be a pod: its shape is checked against
the Kubernetes schema, and its size is bounded.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from trainop_core.api.podtemplate import check_template
from trainop_core.decorators.review import DecorationError
from trainop_core.gang import PLUGINS_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION, VOLCANO_TASK_ANNOTATION

OPERATOR_PREFIX = "training.kubeflow.org/"
GANG_KEYS = frozenset({PLUGINS_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION, VOLCANO_TASK_ANNOTATION})
MAX_POD_BYTES = 1024 * 1024  # a patched pod larger than this is refused (etcd's is 1.5 MiB)


def patched_pod(pod: dict[str, Any], ops: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A patched copy of `pod`; DecorationError if the patch does not apply, touches what it may
    not, or leaves something that is not a pod."""
    import jsonpatch

    result = copy.deepcopy(pod)
    for i, op in enumerate(ops):
        try:  # each pod gets values of its own: no two pods share an object
            result = jsonpatch.JsonPatch([copy.deepcopy(op)]).apply(result, in_place=True)
        except Exception as exc:  # JsonPatchException, JsonPointerException, bad values, ...
            raise DecorationError("patch_failed", f"patch[{i}] does not apply: {exc}") from None
        if op.get("op") == "copy" and _size(result) > MAX_POD_BYTES:
            raise DecorationError("patch_failed", f"the patched pod exceeds {MAX_POD_BYTES} bytes")
    if not isinstance(result, dict):
        raise DecorationError("forbidden_patch", "the patch replaces the whole pod")
    touched = forbidden_changes(pod, result)
    if touched:
        raise DecorationError("forbidden_patch", "the patch changes " + "; ".join(touched))
    _check_shape(result)
    return result


def forbidden_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What `after` changed of `before` that a decorator server may not change."""
    changed = []
    for key in ("apiVersion", "kind"):
        if before.get(key) != after.get(key):
            changed.append(key)
    meta_before, meta_after = _mapping(before, "metadata"), _mapping(after, "metadata")
    for key in ("name", "namespace", "ownerReferences"):
        if meta_before.get(key) != meta_after.get(key):
            changed.append(f"metadata.{key}")
    for key in ("labels", "annotations"):
        if _identity(meta_before, key) != _identity(meta_after, key):
            changed.append(f"the operator's metadata.{key}")
    spec_before, spec_after = _mapping(before, "spec"), _mapping(after, "spec")
    if spec_before.get("restartPolicy") != spec_after.get("restartPolicy"):
        changed.append("spec.restartPolicy")
    for key in ("initContainers", "containers"):
        changed += _container_changes(spec_before.get(key), spec_after.get(key), f"spec.{key}")
    return changed


def _identity(meta: dict[str, Any], key: str) -> dict[str, Any]:
    entries = meta.get(key)
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if k.startswith(OPERATOR_PREFIX) or k in GANG_KEYS}


def _container_changes(before: Any, after: Any, path: str) -> list[str]:
    old, new = _by_name(before), _by_name(after)
    changed = []
    for name, container in old.items():
        if name not in new:
            changed.append(f"{path}: removes container {name!r}")
            continue
        env = _env(container)
        names = {e.get("name") for e in env}
        kept = [e for e in _env(new[name]) if e.get("name") in names]
        if kept != env:
            changed.append(f"{path}[{name}].env: the variables the job and its contract set")
    return changed


def _env(container: dict[str, Any]) -> list[dict[str, Any]]:
    entries = container.get("env")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _by_name(containers: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(containers, list):
        return {}
    return {str(c.get("name")): c for c in containers if isinstance(c, dict)}


def _mapping(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _check_shape(pod: dict[str, Any]) -> None:
    if _size(pod) > MAX_POD_BYTES:
        raise DecorationError("patch_failed", f"the patched pod exceeds {MAX_POD_BYTES} bytes")
    template = {"metadata": pod.get("metadata"), "spec": pod.get("spec")}
    problems = check_template(template, "")
    if problems:
        listed = "; ".join(str(p) for p in problems[:5])
        raise DecorationError("patch_failed", f"the patched pod is not a valid pod: {listed}")


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str))
