"""A container's environment as a kubelet computes it: envFrom, env, the downward API.

Pure but for one injected reader of ConfigMaps and Secrets (:class:`ObjectSource`). The order is
the kubelet's: the Service links first (the `kubernetes` Service's ``KUBERNETES_SERVICE_HOST``,
``KUBERNETES_PORT_443_TCP``..., :func:`service_link_env`), then `envFrom` sources (in order, a
later one overriding an earlier one), then `env` entries, each value `$(VAR)`-expanded against
what is defined before it. A missing
reference that is not `optional` raises :class:`ConfigError`, which the node reports as the
container's waiting reason ``CreateContainerConfigError`` (and tries again), as a kubelet does.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol

from trainop_core.backends.process.podspec import expand
from trainop_core.gang import parse_quantity

Obj = dict[str, Any]


class ConfigError(Exception):
    """A container cannot be configured yet (a missing ConfigMap, Secret or key)."""


class ObjectSource(Protocol):
    """Reads the objects a pod's env and volumes refer to."""

    def configmap(self, namespace: str, name: str) -> Obj | None:
        """The ConfigMap, or None if it does not exist. May do I/O; raises on other failures."""
        ...

    def secret(self, namespace: str, name: str) -> Obj | None:
        """The Secret, or None if it does not exist. May do I/O; raises on other failures."""
        ...


def configmap_data(obj: Obj) -> dict[str, bytes]:
    """A ConfigMap's `data` and `binaryData` as bytes, by key."""
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def secret_data(obj: Obj) -> dict[str, bytes]:
    """A Secret's `data` (base64 on the wire) and `stringData` as bytes, by key."""
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data.update({k: str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return data


def read_source(source: ObjectSource, kind: str, namespace: str, name: str) -> dict[str, bytes]:
    """The data of ConfigMap or Secret `name` (`kind` "configMap" or "secret"); ConfigError
    when it does not exist."""
    if kind == "configMap":
        found = source.configmap(namespace, name)
        if found is None:
            raise ConfigError(f'configmap "{name}" not found')
        return configmap_data(found)
    found = source.secret(namespace, name)
    if found is None:
        raise ConfigError(f'secret "{name}" not found')
    return secret_data(found)


def downward_fields(pod: Obj, node_name: str, pod_ip: str, host_ip: str) -> dict[str, str]:
    """The `fieldRef.fieldPath` values of `pod` on this node."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    fields = {
        "metadata.name": str(meta.get("name", "")),
        "metadata.namespace": str(meta.get("namespace", "default")),
        "metadata.uid": str(meta.get("uid", "")),
        "spec.nodeName": node_name,
        "spec.serviceAccountName": str(spec.get("serviceAccountName") or "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    for key in ("labels", "annotations"):
        for name, value in (meta.get(key) or {}).items():
            fields[f"metadata.{key}['{name}']"] = str(value)
    return fields


def resource_value(
    pod: Obj, container: str, ref: Mapping[str, Any], node: Mapping[str, str]
) -> str:
    """`resourceFieldRef`: the container's limit (or request), rounded up in units of the
    divisor; an unset limit is the node's allocatable, as a kubelet reports it."""
    target = ref.get("containerName") or container
    found = next((c for c in pod["spec"]["containers"] if c.get("name") == target), None)
    if found is None:
        found = next(c for c in pod["spec"].get("initContainers") or [] if c["name"] == target)
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    resources = (found.get("resources") or {}).get(kind) or {}
    raw = resources.get(resource)
    if raw is None:
        raw = node.get(resource, "0") if kind == "limits" else "0"
    divisor = parse_quantity(ref.get("divisor") or "1") or Decimal(1)
    return str(max(0, math.ceil(parse_quantity(raw) / divisor)))


def service_link_env(service: Obj) -> dict[str, str]:
    """The docker-link style variables a kubelet gives every container for `service` (one with
    a cluster IP; none for a headless one): ``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT``
    (its first port), ``<NAME>_SERVICE_PORT_<PORT NAME>``, ``<NAME>_PORT`` and
    ``<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]``."""
    spec = service.get("spec") or {}
    host, ports = str(spec.get("clusterIP") or "None"), spec.get("ports") or []
    if host in ("None", "") or not ports:
        return {}
    name = str(service["metadata"]["name"]).upper().replace("-", "_")
    env = {f"{name}_SERVICE_HOST": host, f"{name}_SERVICE_PORT": str(ports[0]["port"])}
    for port in ports:
        if port.get("name"):
            label = str(port["name"]).upper().replace("-", "_")
            env[f"{name}_SERVICE_PORT_{label}"] = str(port["port"])
    first = ports[0]
    env[f"{name}_PORT"] = f"{str(first.get('protocol', 'TCP')).lower()}://{host}:{first['port']}"
    for port in ports:
        proto, number = str(port.get("protocol", "TCP")), str(port["port"])
        prefix = f"{name}_PORT_{number}_{proto.upper()}"
        env[prefix] = f"{proto.lower()}://{host}:{number}"
        env |= {f"{prefix}_PROTO": proto.lower(), f"{prefix}_PORT": number, f"{prefix}_ADDR": host}
    return env


def container_env(
    pod: Obj,
    container: Mapping[str, Any],
    fields: Mapping[str, str],
    node_allocatable: Mapping[str, str],
    source: ObjectSource,
    services: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's variables (the Service links `services`, then envFrom, then env),
    kubelet-ordered. ConfigError if a required reference is missing."""
    namespace = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = dict(services or {})
    for item in container.get("envFrom") or []:
        env.update(_env_from(source, namespace, item))
    for entry in container.get("env") or []:
        name = str(entry["name"])
        if "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), env.get)
            continue
        value = _value_from(pod, container, entry["valueFrom"], fields, node_allocatable, source)
        if value is not None:
            env[name] = value
    return env


def _env_from(source: ObjectSource, namespace: str, item: Mapping[str, Any]) -> dict[str, str]:
    kind = "configMap" if "configMapRef" in item else "secret"
    ref = item.get("configMapRef") or item.get("secretRef") or {}
    try:
        data = read_source(source, kind, namespace, str(ref.get("name", "")))
    except ConfigError:
        if ref.get("optional"):
            return {}
        raise
    prefix = str(item.get("prefix") or "")
    return {prefix + key: value.decode(errors="replace") for key, value in data.items()}


def _value_from(
    pod: Obj,
    container: Mapping[str, Any],
    value_from: Mapping[str, Any],
    fields: Mapping[str, str],
    node_allocatable: Mapping[str, str],
    source: ObjectSource,
) -> str | None:
    if "fieldRef" in value_from:
        path = str(value_from["fieldRef"].get("fieldPath", ""))
        if path not in fields:
            raise ConfigError(f"unsupported fieldPath {path!r}")
        return fields[path]
    if "resourceFieldRef" in value_from:
        ref = value_from["resourceFieldRef"]
        return resource_value(pod, str(container["name"]), ref, node_allocatable)
    kind = "configMap" if "configMapKeyRef" in value_from else "secret"
    ref = value_from.get("configMapKeyRef") or value_from.get("secretKeyRef") or {}
    try:
        data = read_source(source, kind, pod["metadata"]["namespace"], str(ref.get("name", "")))
        if ref.get("key") not in data:
            raise ConfigError(f"couldn't find key {ref.get('key')} in {kind} {ref.get('name')}")
    except ConfigError:
        if ref.get("optional"):
            return None
        raise
    return data[str(ref["key"])].decode(errors="replace")
