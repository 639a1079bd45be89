"""Which addresses a cluster name has, following the Kubernetes DNS specification.

``<svc>.<ns>.svc.<zone>``: a ClusterIP Service's cluster IP; a headless Service's ready endpoint
addresses (EndpointSlices; the EndpointSlice controller already counts every endpoint ready when
the Service publishes not-ready addresses). ``<host>.<svc>.<ns>.svc.<zone>``: the endpoint with that
hostname, or a Pod whose spec.hostname and spec.subdomain are these while a headless Service of
that name exists (ready, or published not ready). ``<a-b-c-d>.<ns>.pod.<zone>``: that address.
A pure function of what the cache holds; no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

from trainop_core.operator.kube import Obj


class View(Protocol):
    """The cached objects records are made from (thread-safe, no I/O)."""

    def service(self, namespace: str, name: str) -> Obj | None: ...

    def endpoint_slices(self, namespace: str, service: str) -> list[Obj]: ...

    def pods_named(self, namespace: str, subdomain: str, hostname: str) -> list[Obj]: ...


def addresses(name: str, view: View, zone: str = "cluster.local") -> list[str] | None:
    """The IPv4 addresses of `name` (lower case, no trailing dot); None if no such name."""
    suffix = "." + zone
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    if len(labels) == 3 and labels[2] == "svc":
        return _service_addresses(view, labels[1], labels[0])
    if len(labels) == 4 and labels[3] == "svc":
        return _hostname_addresses(view, labels[2], labels[1], labels[0])
    if len(labels) == 3 and labels[2] == "pod":
        return _dashed_address(labels[0])
    return None


def _service_addresses(view: View, namespace: str, name: str) -> list[str] | None:
    service = view.service(namespace, name)
    if service is None:
        return None
    cluster_ip = service.get("spec", {}).get("clusterIP") or "None"
    if cluster_ip != "None":
        return [cluster_ip]
    found = [a for _, a in ready_endpoints(view.endpoint_slices(namespace, name))]
    return sorted(set(found), key=ipaddress.IPv4Address) or None


def _hostname_addresses(view: View, namespace: str, service: str, host: str) -> list[str] | None:
    headless = view.service(namespace, service)
    if headless is None or headless.get("spec", {}).get("clusterIP") != "None":
        return None  # only a headless Service gives its pods names
    slices = view.endpoint_slices(namespace, service)
    found = {a for hostname, a in ready_endpoints(slices) if hostname == host}
    if not found:
        found = set(_pod_addresses(view, headless, namespace, service, host))
    return sorted(found, key=ipaddress.IPv4Address) or None


def _pod_addresses(view: View, headless: Obj, namespace: str, service: str, host: str) -> list[str]:
    any_state = bool(headless["spec"].get("publishNotReadyAddresses"))
    pods = view.pods_named(namespace, service, host)
    return [ip for pod in pods if (ip := _pod_ip(pod)) and (any_state or _ready(pod))]


def ready_endpoints(slices: list[Obj]) -> list[tuple[str, str]]:
    """(hostname, IPv4 address) of every ready endpoint (unset readiness counts as ready)."""
    found = []
    for eps in slices:
        if eps.get("addressType") != "IPv4":
            continue
        for endpoint in eps.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            found += [(endpoint.get("hostname") or "", a) for a in endpoint.get("addresses") or []]
    return [(host, a) for host, a in found if _is_ipv4(a)]


def _pod_ip(pod: Obj) -> str:
    status = pod.get("status") or {}
    ip = str(status.get("podIP") or "")
    return ip if _is_ipv4(ip) and status.get("phase") not in ("Succeeded", "Failed") else ""


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _dashed_address(label: str) -> list[str] | None:
    dotted = label.replace("-", ".")
    return [dotted] if label.count("-") == 3 and _is_ipv4(dotted) else None


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True
