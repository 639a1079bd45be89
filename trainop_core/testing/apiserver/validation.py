"""Per-kind defaulting and validation for the built-in types (a small, exact subset).

``default_kind`` fills what the real API server defaults on create; ``validate_kind`` returns
``(field path, message)`` problems that become a 422 Invalid.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from .resources import ResourceType

_cluster_ips = itertools.count(10)
_ip_lock = threading.Lock()
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


def _next_cluster_ip() -> str:
    with _ip_lock:
        n = next(_cluster_ips)
    return f"10.96.{(n >> 8) & 255}.{n & 255}"


def default_kind(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Fill server-side defaults in place (``old`` is None on create)."""
    if rt.custom or rt.group not in ("", "apiextensions.k8s.io"):
        return
    if rt.plural == "pods":
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        for container in spec.get("containers") or []:
            if isinstance(container, dict):
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                for port in container.get("ports") or []:
                    port.setdefault("protocol", "TCP")
        if old is None:
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt.plural == "services":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if old is not None:
            spec["clusterIP"] = old.get("spec", {}).get("clusterIP")
        elif not spec.get("clusterIP"):
            spec["clusterIP"] = _next_cluster_ip()
        spec["clusterIPs"] = [spec["clusterIP"]]
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj.setdefault("status", {"loadBalancer": {}})
    elif rt.plural == "namespaces":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        if old is None:
            obj["status"] = {"phase": "Active"}
    elif rt.plural == "customresourcedefinitions" and old is None:
        _default_crd(obj)


def _default_crd(obj: dict[str, Any]) -> None:
    spec = obj.get("spec", {})
    for version in spec.get("versions") or []:
        version.setdefault("served", True)
    obj["status"] = {
        "acceptedNames": spec.get("names", {}),
        "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
    }


def validate_kind(
    rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
) -> list[tuple[str, str]]:
    if rt.custom or rt.group not in ("", "apiextensions.k8s.io"):
        return []
    check = _VALIDATORS.get(rt.plural)
    return check(obj, old) if check else []


def _validate_pod(obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    containers = spec.get("containers")
    problems: list[tuple[str, str]] = []
    if not containers or not isinstance(containers, list):
        return [("spec.containers", "Required value")]
    seen: set[str] = set()
    for i, container in enumerate(containers):
        name = container.get("name") if isinstance(container, dict) else None
        if not name:
            problems.append((f"spec.containers[{i}].name", "Required value"))
        elif name in seen:
            problems.append((f"spec.containers[{i}].name", f'Duplicate value: "{name}"'))
        else:
            seen.add(name)
        if isinstance(container, dict) and not container.get("image"):
            problems.append((f"spec.containers[{i}].image", "Required value"))
    if spec.get("restartPolicy") not in _RESTART_POLICIES:
        problems.append(("spec.restartPolicy", f'Unsupported value: "{spec.get("restartPolicy")}"'))
    if old is not None and not problems and _pod_spec_mutated(old.get("spec", {}), spec):
        problems.append(
            (
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations`",
            )
        )
    return problems


def _pod_spec_mutated(old: dict[str, Any], new: dict[str, Any]) -> bool:
    def normalised(spec: dict[str, Any]) -> dict[str, Any]:
        spec = dict(spec)
        spec.pop("activeDeadlineSeconds", None)
        spec.pop("tolerations", None)
        spec["containers"] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []
        ]
        return spec

    return normalised(old) != normalised(new)


def _validate_service(obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    if not spec.get("ports") and spec.get("clusterIP") != "None":
        return [("spec.ports", "Required value")]
    problems = []
    for i, port in enumerate(spec.get("ports") or []):
        if not isinstance(port.get("port"), int) or not 0 < port["port"] < 65536:
            problems.append((f"spec.ports[{i}].port", "Invalid value: must be 1-65535"))
    if len(spec.get("ports") or []) > 1 and not all(p.get("name") for p in spec["ports"]):
        problems.append(("spec.ports", "Required value: port names are required"))
    return problems


def _validate_crd(obj: dict[str, Any], old: dict[str, Any] | None) -> list[tuple[str, str]]:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    problems = []
    if not spec.get("group"):
        problems.append(("spec.group", "Required value"))
    if not names.get("plural") or not names.get("kind"):
        problems.append(("spec.names", "Required value: plural and kind are required"))
    elif obj["metadata"].get("name") != f"{names['plural']}.{spec.get('group')}":
        problems.append(
            ("metadata.name", "Invalid value: must be spec.names.plural+'.'+spec.group")
        )
    versions = spec.get("versions") or []
    if not versions:
        problems.append(("spec.versions", "Required value"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        problems.append(("spec.versions", "Invalid value: must have exactly one storage version"))
    if spec.get("scope", "Namespaced") not in ("Namespaced", "Cluster"):
        problems.append(("spec.scope", "Unsupported value"))
    if old is not None and old.get("spec", {}).get("group") != spec.get("group"):
        problems.append(("spec.group", "Invalid value: field is immutable"))
    return problems


_VALIDATORS = {
    "pods": _validate_pod,
    "services": _validate_service,
    "customresourcedefinitions": _validate_crd,
}
