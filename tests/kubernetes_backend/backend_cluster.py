"""Helpers for the kubernetes backend tests: polling, and the operator stand-in.

Tests that do not run the operator stand in for it through `Cluster`: it writes job status and
replica pods straight into the server's store (no HTTP, so request counters show only what the
backend itself sent), and the kubelet stand-in moves the pods through their lifecycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from trainop_core.api.types import format_time, utc_now
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing import ApiServer, Kubelet

Obj = dict[str, Any]

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 5.0) -> T:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s")
        time.sleep(0.02)
    return value


class Cluster:
    """Plays the operator's part for tests that do not run it: status, pods and their logs."""

    def __init__(self, server: ApiServer, kubelet: Kubelet, registry: KindRegistry) -> None:
        self.server = server
        self.kubelet = kubelet
        self.registry = registry

    def namespace(self, name: str) -> None:
        self.server.store.create(self.server.store.resource("namespaces"), "", {
            "metadata": {"name": name}
        })  # fmt: skip

    def job(self, kind: str, name: str, namespace: str = "default") -> Obj:
        k = self.registry.get(kind)
        rt = self.server.store.resource(k.plural, "kubeflow.org")
        return self.server.store.get(rt, namespace, name)

    def set_condition(self, kind: str, name: str, ctype: str, namespace: str = "default") -> Obj:
        """Append a true condition `ctype` through the status subresource (as the operator)."""
        now = format_time(utc_now())
        k = self.registry.get(kind)
        rt = self.server.store.resource(k.plural, "kubeflow.org")

        def change(obj: Obj) -> Obj:
            status = obj.setdefault("status", {})
            status.setdefault("conditions", []).append(
                {"type": ctype, "status": "True", "reason": f"{k.kind}{ctype}",
                 "message": f"{ctype} by the test", "lastUpdateTime": now,
                 "lastTransitionTime": now}
            )  # fmt: skip
            status.setdefault("replicaStatuses", {})
            return obj

        return self.server.store.mutate(rt, namespace, name, change, subresource="status")

    def add_pod(
        self, kind: str, name: str, rtype: str, index: int, namespace: str = "default"
    ) -> str:
        """A replica pod labelled and owned like the operator's; returns its name."""
        k = self.registry.get(kind)
        job = self.job(kind, name, namespace)
        pod_name = f"{name}-{rtype.lower()}-{index}"
        labels = {
            "training.kubeflow.org/operator-name": k.controller_name,
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/replica-type": rtype.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        owner = {
            "apiVersion": "kubeflow.org/v1",
            "kind": k.kind,
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        pod = {
            "metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner]},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": k.default_container, "image": "busybox"}],
            },
        }
        self.server.store.create(self.server.store.resource("pods"), namespace, pod)
        return pod_name

    def pods(self, namespace: str = "default") -> list[Obj]:
        items = self.server.store.list(self.server.store.resource("pods"), namespace).items
        return list(items)
