"""What cluster DNS and the service proxy read: Services, EndpointSlices and Pods, list+watched.

The operator's own :class:`~trainop_core.operator.informer.Informer` (one LIST+WATCH per type,
relisting on 410 Gone, backing off on errors) over its one HTTP layer. Objects are trimmed to
the fields read here, so a cluster of many pods costs little memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainop_core.operator.informer import Informer, RestListWatch
from trainop_core.operator.kube import PODS, SERVICES, KubeClient, Obj, Resource

ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class ClusterView:
    """Services, EndpointSlices and Pods of every namespace, kept current from `client`.

    Reads are thread-safe and do no I/O. `on_services` is called (on an informer thread, must
    be quick) whenever a Service is added, changed or removed."""

    def __init__(self, client: KubeClient, on_services: Callable[[], None] = lambda: None) -> None:
        self.services = Informer(
            "net-services", RestListWatch(client, SERVICES), transform=_service
        )
        self.slices = Informer(
            "net-slices", RestListWatch(client, ENDPOINT_SLICES), transform=_slice
        )
        self.pods = Informer("net-pods", RestListWatch(client, PODS), transform=_pod)
        self.slices.add_index("service", _slice_service)
        self.pods.add_index("hostname", _pod_hostname)
        self.services.add_handler(_Notify(on_services))
        self._stop = threading.Event()

    def start(self, timeout: float) -> None:
        """Start the three informers; wait until each has listed once (TimeoutError if not)."""
        informers = (self.services, self.slices, self.pods)
        for informer in informers:
            informer.start(self._stop)
        for informer in informers:
            if not informer.wait_synced(timeout):
                raise TimeoutError(f"could not list {informer.name} within {timeout:.0f} s")

    def stop(self) -> None:
        self._stop.set()
        for informer in (self.services, self.slices, self.pods):
            informer.interrupt()

    # --- reads ---------------------------------------------------------------------------------
    def service(self, namespace: str, name: str) -> Obj | None:
        return self.services.get(f"{namespace}/{name}")

    def all_services(self) -> list[Obj]:
        return self.services.list()

    def endpoint_slices(self, namespace: str, service: str) -> list[Obj]:
        return self.slices.by_index("service", f"{namespace}/{service}")

    def pods_named(self, namespace: str, subdomain: str, hostname: str) -> list[Obj]:
        """Pods whose spec.hostname and spec.subdomain are these."""
        return self.pods.by_index("hostname", f"{namespace}/{subdomain}/{hostname}")


class _Notify:
    def __init__(self, call: Callable[[], None]) -> None:
        self.call = call

    def on_add(self, obj: Obj) -> None:
        self.call()

    def on_update(self, old: Obj, new: Obj) -> None:
        self.call()

    def on_delete(self, obj: Obj) -> None:
        self.call()


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    keep = ("name", "namespace", "resourceVersion", "labels", "uid")
    return {k: meta[k] for k in keep if k in meta}


def _service(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    keep = ("type", "clusterIP", "ports", "publishNotReadyAddresses")
    return {"metadata": _meta(obj), "spec": {k: spec[k] for k in keep if k in spec}}


def _slice(obj: Obj) -> Obj:
    keep = ("addressType", "endpoints", "ports")
    return {"metadata": _meta(obj), **{k: obj[k] for k in keep if k in obj}}


def _pod(obj: Obj) -> Obj:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "metadata": _meta(obj),
        "spec": {k: spec[k] for k in ("hostname", "subdomain") if k in spec},
        "status": {k: status[k] for k in ("podIP", "phase", "conditions") if k in status},
    }


def _slice_service(obj: Obj) -> list[str]:
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return [f"{meta.get('namespace', '')}/{service}"] if service else []


def _pod_hostname(obj: Obj) -> list[str]:
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    if not spec.get("hostname") or not spec.get("subdomain"):
        return []
    return [f"{meta.get('namespace', '')}/{spec['subdomain']}/{spec['hostname']}"]
