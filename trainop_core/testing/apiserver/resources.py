"""Resource types the fake API server serves: the built-in table and CRD-derived types.

A :class:`ResourceType` is plain data (the same facts discovery publishes). The
:class:`Registry` holds the built-ins plus one type per *served* version of every established
CRD; objects of all versions of one CRD share storage keyed by ``(group, plural)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import errors

VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-trainop",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-01-01T00:00:00Z",
    "goVersion": "python",
    "compiler": "cpython",
    "platform": "linux/amd64",
}
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ScaleSpec:
    """Paths of a CRD's scale subresource (``.spec.replicas`` style, leading dot optional)."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(frozen=True)
class ResourceType:
    """What the server knows about one resource in one group/version."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    tracks_generation: bool = False
    field_selectors: frozenset[str] = COMMON_FIELDS
    scale: ScaleSpec | None = None
    custom: bool = False
    name_rule: str = "subdomain"
    return_deleted_object: bool = False
    create_on_update: bool = False
    categories: tuple[str, ...] = ()
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False)

    @property
    def key(self) -> tuple[str, str]:
        """Storage key shared by all versions of the resource."""
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


POD_FIELDS = COMMON_FIELDS | {
    "status.phase",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.nominatedNodeName",
}
EVENT_FIELDS = (
    COMMON_FIELDS
    | {
        f"involvedObject.{f}"
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    | {"reason", "reportingComponent", "source", "type"}
)


def builtin_types() -> list[ResourceType]:
    """The built-in resources: core v1, coordination.k8s.io/v1, apiextensions.k8s.io/v1."""
    return [
        ResourceType(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            False,
            ("ns",),
            frozenset({"status"}),
            field_selectors=COMMON_FIELDS | {"status.phase"},
            name_rule="label",
            return_deleted_object=True,
        ),
        ResourceType(
            "",
            "v1",
            "pods",
            "pod",
            "Pod",
            True,
            ("po",),
            frozenset({"status", "log"}),
            field_selectors=POD_FIELDS,
            return_deleted_object=True,
            categories=("all",),
        ),
        ResourceType(
            "",
            "v1",
            "services",
            "service",
            "Service",
            True,
            ("svc",),
            frozenset({"status"}),
            name_rule="label1035",
            return_deleted_object=True,
            categories=("all",),
        ),
        ResourceType(
            "",
            "v1",
            "events",
            "event",
            "Event",
            True,
            ("ev",),
            field_selectors=EVENT_FIELDS,
            create_on_update=True,
        ),
        ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
        ResourceType("", "v1", "secrets", "secret", "Secret", True),
        ResourceType(
            "coordination.k8s.io", "v1", "leases", "lease", "Lease", True, create_on_update=True
        ),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            False,
            ("crd", "crds"),
            frozenset({"status"}),
            tracks_generation=True,
        ),
    ]


def _dotted(path: str) -> str:
    return path[1:] if path.startswith(".") else path


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """One :class:`ResourceType` per served version of ``crd`` (an apiextensions/v1 object)."""
    spec = crd.get("spec", {})
    names = spec.get("names", {})
    result = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        subs = version.get("subresources") or {}
        scale = subs.get("scale")
        scale_spec = None
        if scale is not None:
            scale_spec = ScaleSpec(
                _dotted(scale.get("specReplicasPath", ".spec.replicas")),
                _dotted(scale.get("statusReplicasPath", ".status.replicas")),
                _dotted(scale["labelSelectorPath"]) if scale.get("labelSelectorPath") else None,
            )
        result.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                subresources=frozenset(k for k in ("status", "scale") if k in subs),
                tracks_generation=True,
                scale=scale_spec,
                custom=True,
                categories=tuple(names.get("categories") or ()),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return result


def storage_version(crd: dict[str, Any]) -> str:
    versions = crd.get("spec", {}).get("versions", [])
    for version in versions:
        if version.get("storage"):
            return str(version["name"])
    return str(versions[0]["name"]) if versions else "v1"


class Registry:
    """Lookup of resource types by ``(group, version, plural)``; not thread-safe on its own."""

    def __init__(self, types: Iterable[ResourceType] = ()) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._crd_types: dict[str, list[ResourceType]] = {}
        for rt in types:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def storage_type(self, group: str, plural: str) -> ResourceType | None:
        """Any served type of ``(group, plural)``; used for internal (version-less) access."""
        for (g, _, p), rt in self._types.items():
            if g == group and p == plural:
                return rt
        return None

    def set_crd(self, crd_name: str, types: list[ResourceType]) -> None:
        self.remove_crd(crd_name)
        self._crd_types[crd_name] = types
        for rt in types:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_crd(self, crd_name: str) -> None:
        for rt in self._crd_types.pop(crd_name, []):
            self._types.pop((rt.group, rt.version, rt.plural), None)

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def group_versions(self) -> dict[str, list[str]]:
        """``group -> versions`` for every non-core group, in registration order."""
        result: dict[str, list[str]] = {}
        for rt in self._types.values():
            if rt.group and rt.version not in result.setdefault(rt.group, []):
                result[rt.group].append(rt.version)
        return result


def _resource_entry(rt: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(VERBS),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entries = [entry]
    for sub in sorted(rt.subresources):
        kind, verbs = rt.kind, ["get", "patch", "update"]
        if sub == "log":
            kind, verbs = "Pod", ["get"]
        elif sub == "scale":
            kind = "Scale"
        entries.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
        )
    return entries


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """The legacy discovery ``APIResourceList`` for one group/version, or None if unknown."""
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [e for rt in types for e in _resource_entry(rt)],
    }


def group_list(registry: Registry) -> dict[str, Any]:
    """The legacy discovery ``APIGroupList`` served at ``/apis``."""
    groups = []
    for group, versions in registry.group_versions().items():
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group_info(registry: Registry, group: str) -> dict[str, Any] | None:
    for entry in group_list(registry)["groups"]:
        if entry["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    return None


def discovery(registry: Registry, parts: list[str], address: str) -> dict[str, Any] | bytes | None:
    """The discovery document at ``/<parts>``; None if the path is not a discovery path.

    Unknown groups and ``/openapi/*`` raise 404 (kubectl then skips schema validation when
    run with ``--validate=false``).
    """
    body: dict[str, Any] | bytes | None = None
    if parts == ["version"]:
        body = VERSION
    elif parts in (["healthz"], ["readyz"], ["livez"]):
        body = b"ok"
    elif parts == ["api"]:
        cidrs = [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]
        body = {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": cidrs}
    elif parts == ["api", "v1"]:
        body = resource_list(registry, "", "v1")
    elif parts == ["apis"]:
        body = group_list(registry)
    elif len(parts) == 2 and parts[0] == "apis":
        body = group_info(registry, parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        body = resource_list(registry, parts[1], parts[2])
    elif parts and parts[0] != "openapi":
        return None
    if body is None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    return body
