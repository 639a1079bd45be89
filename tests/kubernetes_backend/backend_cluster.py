"""Helpers for the kubernetes backend tests: polling, and the operator stand-in.

Tests that do not run the operator stand in for it through `Cluster`: it writes job status (through
the status subresource) and replica pods as the admin, straight to the real kube-apiserver (so the
fault proxy in front of it counts only what the backend itself sent), and the kubelet stand-in
moves the pods through their lifecycle and serves their logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from trainop_core.api.types import format_time, utc_now
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.kubelet import Kubelet
from trainop_core.testing.rest import RestError

Obj = dict[str, Any]

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout}s")
        time.sleep(0.02)
    return value


class Cluster:
    """Plays the operator's part for tests that do not run it: status, pods and their logs."""

    def __init__(
        self,
        control_plane: ControlPlane,
        namespace: str,
        registry: KindRegistry,
        kubelet: Kubelet | None = None,
    ) -> None:
        self.control_plane = control_plane
        self.rest = control_plane.rest
        self.namespace = namespace
        self.registry = registry
        self._kubelet = kubelet

    @property
    def kubelet(self) -> Kubelet:
        assert self._kubelet is not None, "this cluster has no kubelet stand-in"
        return self._kubelet

    def job_path(self, kind: str, name: str = "", namespace: str | None = None) -> str:
        plural = self.registry.get(kind).plural
        base = f"/apis/kubeflow.org/v1/namespaces/{namespace or self.namespace}/{plural}"
        return f"{base}/{name}" if name else base

    def job(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self.rest.get(self.job_path(kind, name, namespace))

    def create_job(self, job: Obj, namespace: str | None = None) -> Obj:
        return self.rest.create(self.job_path(job["kind"], namespace=namespace), job)

    def set_condition(self, kind: str, name: str, ctype: str, namespace: str | None = None) -> Obj:
        """Append a true condition `ctype` through the status subresource (as the operator)."""
        now = format_time(utc_now())
        k = self.registry.get(kind)
        path = self.job_path(kind, name, namespace) + "/status"
        for _ in range(10):
            obj = self.rest.get(path)
            status = obj.setdefault("status", {})
            status.setdefault("conditions", []).append(
                {"type": ctype, "status": "True", "reason": f"{k.kind}{ctype}",
                 "message": f"{ctype} by the test", "lastUpdateTime": now,
                 "lastTransitionTime": now}
            )  # fmt: skip
            status.setdefault("replicaStatuses", {})
            try:
                return self.rest.replace(path, obj)
            except RestError as err:
                if err.status != 409:
                    raise
        raise AssertionError(f"{kind} {name}: status kept changing")

    def add_pod(
        self, kind: str, name: str, rtype: str, index: int, namespace: str | None = None
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
        self.rest.create(f"/api/v1/namespaces/{namespace or self.namespace}/pods", pod)
        return pod_name

    def append_log(self, kind: str, pod: str, text: str) -> None:
        """Text the pod's default container writes (served through the kubelet stand-in)."""
        container = self.registry.get(kind).default_container
        self.kubelet.append_log(self.namespace, pod, text, container)

    def pods(self, namespace: str | None = None) -> list[Obj]:
        found = self.rest.get(f"/api/v1/namespaces/{namespace or self.namespace}/pods")
        return list(found["items"])

    def touch(self) -> None:
        """One more write (a ConfigMap): etcd's revision moves on."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        self.rest.create(path, {"metadata": {"generateName": "touch-"}})
