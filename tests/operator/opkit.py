"""Helpers for the operator tests: a cluster (fake API server + kubelet + CRDs) and a running
operator (a `Manager` on a thread, or `python -m trainop_core.operator` as a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from clusters import install_crds
from kubernetes import client

from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.operator.manager import Manager
from trainop_core.operator.options import LeaseTimings, Options
from trainop_core.testing import ApiServer, Kubelet, Rule
from trainop_core.testing.apiserver.events import Event

Obj = dict[str, Any]
T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
PLURALS = {
    "TFJob": "tfjobs",
    "PyTorchJob": "pytorchjobs",
    "MXJob": "mxjobs",
    "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs",
}
JOB_LABEL = "training.kubeflow.org/job-name"


def wait_for(check: Callable[[], T], timeout: float = 10.0, what: str = "") -> T:
    """Poll `check` until truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check} (last {value!r})")
        time.sleep(0.05)
    return value


@dataclass
class Cluster:
    """The fake API server with CRDs installed, a kubelet, and official-client handles."""

    server: ApiServer
    kubelet: Kubelet
    registry: KindRegistry
    kubeconfig: Path
    pod_adds: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.api = self.server.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.server.store.subscribe(self._count_pod_adds)

    def _count_pod_adds(self, event: Event) -> None:
        if event.rkey == ("", "pods") and event.type == "ADDED":
            meta = event.obj["metadata"]
            self.pod_adds[f"{meta['namespace']}/{meta['name']}"] += 1

    # --- jobs ----------------------------------------------------------------------------------
    def create_job(self, job: Obj, namespace: str = "default") -> Obj:
        plural = PLURALS[job["kind"]]
        created: Obj = self.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, plural, job
        )
        return created

    def get_job(self, kind: str, name: str, namespace: str = "default") -> Obj:
        job: Obj = self.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, PLURALS[kind], name
        )
        return job

    def patch_job(self, kind: str, name: str, patch: Obj, namespace: str = "default") -> None:
        self.custom.patch_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, PLURALS[kind], name, patch
        )

    def delete_job(self, kind: str, name: str, namespace: str = "default") -> None:
        self.custom.delete_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, PLURALS[kind], name
        )

    def conditions(self, kind: str, name: str, namespace: str = "default") -> dict[str, str]:
        status = self.get_job(kind, name, namespace).get("status") or {}
        return {c["type"]: c["status"] for c in status.get("conditions") or []}

    def wait_condition(
        self, kind: str, name: str, ctype: str, namespace: str = "default", timeout: float = 15.0
    ) -> dict[str, str]:
        return wait_for(
            lambda: (c := self.conditions(kind, name, namespace)).get(ctype) == "True" and c,
            timeout,
            f"{kind} {namespace}/{name} {ctype}",
        )

    # --- children ------------------------------------------------------------------------------
    def pods(self, job: str, namespace: str = "default") -> list[Any]:
        found = self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={job}")
        return sorted(found.items, key=lambda p: p.metadata.name)

    def services(self, job: str, namespace: str = "default") -> list[Any]:
        found = self.core.list_namespaced_service(namespace, label_selector=f"{JOB_LABEL}={job}")
        return sorted(found.items, key=lambda s: s.metadata.name)

    def events(self, name: str, namespace: str = "default") -> list[Any]:
        found = self.core.list_namespaced_event(namespace)
        return [e for e in found.items if e.involved_object.name == name]

    def namespace(self, name: str) -> None:
        self.core.create_namespace({"metadata": {"name": name}})

    def rule(self, pattern: str, **kw: Any) -> None:
        """Kubelet behaviour for pods matching `pattern` (first match wins: put it first)."""
        self.kubelet.rules.insert(0, Rule(pattern=pattern, **kw))


def start_cluster(tmp: Path, bookmark_interval: float = 0.5) -> Cluster:
    server = ApiServer(bookmark_interval=bookmark_interval).start()
    registry = build_registry(entry_points=False)
    install_crds(server, registry)
    kubelet = Kubelet(server).start()
    return Cluster(server, kubelet, registry, server.write_kubeconfig(tmp / "kubeconfig"))


def stop_cluster(cluster: Cluster) -> None:
    cluster.kubelet.stop()
    cluster.server.stop()


def test_options(**overrides: Any) -> Options:
    """Fast, isolated defaults: ephemeral ports, no client limit, short watches and leases."""
    base: dict[str, Any] = dict(
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        kube_api_qps=-1,
        watch_timeout=30,
        watch_read_timeout=10,
        cache_sync_timeout=10,
        lease=LeaseTimings(2.0, 1.5, 0.2),
    )
    base.update(overrides)
    return Options(**base)


test_options.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


class RunningOperator:
    """A Manager on a thread; `stop()` shuts it down and returns its exit code."""

    def __init__(self, cluster: Cluster, **overrides: Any) -> None:
        self.manager = Manager(
            test_options(**overrides), cluster.registry, api_client=cluster.server.api_client()
        )
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="manager")
        self.thread.start()

    def _run(self) -> None:
        self.exit_code = self.manager.run()

    def wait_started(self, timeout: float = 10.0) -> RunningOperator:
        wait_for(lambda: self.manager.workers_started, timeout, "workers started")
        return self

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        port = port or (
            self.manager.metrics_endpoint.port if path == "/metrics" else self.manager.probes.port
        )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def stop(self) -> int | None:
        self.manager.shutdown()
        self.thread.join(10)
        return self.exit_code


def operator_process(cluster: Cluster, *flags: str) -> subprocess.Popen[bytes]:
    """`python -m trainop_core.operator --kubeconfig ...` against the cluster."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "trainop_core.operator",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--metrics-bind-address",
        "0",
        "--health-probe-bind-address",
        "0",
        "--kube-api-qps",
        "0",
        "--watch-timeout",
        "30",
        "--watch-read-timeout",
        "10",
        *flags,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
