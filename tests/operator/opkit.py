"""Helpers for the operator tests: a cluster (a fresh namespace of the session's real control
plane, a kubelet stand-in on it, a fault proxy in front of the server, and a watch counting pod
creations) and a running operator (a `Manager` on a thread, or `python -m trainop_core.operator`
as a subprocess), which reaches the server through the proxy, watching the namespace only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from k8s import delete_namespace
from kubernetes import client

from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.manager import Manager
from trainop_core.operator.options import LeaseTimings, Options
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Kubelet, Rule
from trainop_core.testing.rest import Rest, RestError

Obj = dict[str, Any]
T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
PLURALS = {
    "TFJob": "tfjobs",
    "PyTorchJob": "pytorchjobs",
    "MXJob": "mxjobs",
    "XGBoostJob": "xgboostjobs",
    "JAXJob": "jaxjobs",
    "PaddleJob": "paddlejobs",
    "MPIJob": "mpijobs",
}
JOB_LABEL = "training.kubeflow.org/job-name"


def wait_for(check: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
    """Poll `check` until truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check} (last {value!r})")
        time.sleep(0.05)
    return value


class PodCreations:
    """Watches a namespace's pods from before the first one exists: how many distinct pods (uids)
    each name has had, i.e. how often a pod of that name was created."""

    def __init__(self, rest: Rest, namespace: str) -> None:
        self.rest, self.namespace = rest, namespace
        self._uids: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closer: Any = None
        self._rv = rest.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="pod-creations", daemon=True)
        self._thread.start()

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter({name: len(uids) for name, uids in self._uids.items()})

    def stop(self) -> None:
        self._stop.set()
        if self._closer is not None:
            self._closer.close()
        self._thread.join(10)

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while not self._stop.is_set():
            query = {"resourceVersion": self._rv, "allowWatchBookmarks": True, "timeoutSeconds": 60}
            try:
                self._closer, events = self.rest.stream(path, query, 90)
                for event in events:
                    meta = event["object"].get("metadata", {})
                    self._rv = meta.get("resourceVersion") or self._rv
                    if event["type"] in ("ADDED", "MODIFIED"):
                        with self._lock:
                            self._uids[meta["name"]].add(meta["uid"])
            except (RestError, OSError, ValueError):
                self._stop.wait(0.2)


@dataclass
class Cluster:
    """One test's namespace of the real control plane, driven as admin (directly, not through
    the proxy: the proxy's counters and faults are the operator's alone)."""

    control_plane: ControlPlane
    namespace: str
    kubelet: Kubelet
    registry: KindRegistry
    proxy: FaultProxy
    kubeconfig: Path  # admin, straight to the server, this namespace by default
    creations: PodCreations
    proxies: list[FaultProxy] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.api = self.control_plane.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    @property
    def rest(self) -> Rest:
        return self.control_plane.rest

    @property
    def pod_adds(self) -> Counter[str]:
        """Pod name -> how many pods of that name were created."""
        return self.creations.counts()

    def new_proxy(self) -> FaultProxy:
        """Another fault proxy (e.g. one per operator, to cut one off); stopped at the end."""
        proxy = FaultProxy.for_control_plane(self.control_plane).start()
        self.proxies.append(proxy)
        return proxy

    # --- jobs ----------------------------------------------------------------------------------
    def create_job(self, job: Obj, namespace: str | None = None) -> Obj:
        created: Obj = self.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", namespace or self.namespace, PLURALS[job["kind"]], job
        )
        return created

    def get_job(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        job: Obj = self.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace or self.namespace, PLURALS[kind], name
        )
        return job

    def patch_job(self, kind: str, name: str, patch: Obj, namespace: str | None = None) -> None:
        self.custom.patch_namespaced_custom_object(
            "kubeflow.org", "v1", namespace or self.namespace, PLURALS[kind], name, patch
        )

    def delete_job(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(
            "kubeflow.org", "v1", namespace or self.namespace, PLURALS[kind], name
        )

    def conditions(self, kind: str, name: str, namespace: str | None = None) -> dict[str, str]:
        status = self.get_job(kind, name, namespace).get("status") or {}
        return {c["type"]: c["status"] for c in status.get("conditions") or []}

    def wait_condition(
        self,
        kind: str,
        name: str,
        ctype: str,
        namespace: str | None = None,
        timeout: float = 60.0,
    ) -> dict[str, str]:
        return wait_for(
            lambda: (c := self.conditions(kind, name, namespace)).get(ctype) == "True" and c,
            timeout,
            f"{kind} {namespace or self.namespace}/{name} {ctype}",
        )

    # --- children ------------------------------------------------------------------------------
    def pods(self, job: str, namespace: str | None = None) -> list[Any]:
        found = self.core.list_namespaced_pod(
            namespace or self.namespace, label_selector=f"{JOB_LABEL}={job}"
        )
        return sorted(found.items, key=lambda p: p.metadata.name)

    def services(self, job: str, namespace: str | None = None) -> list[Any]:
        found = self.core.list_namespaced_service(
            namespace or self.namespace, label_selector=f"{JOB_LABEL}={job}"
        )
        return sorted(found.items, key=lambda s: s.metadata.name)

    def events(self, name: str, namespace: str | None = None) -> list[Any]:
        found = self.core.list_namespaced_event(namespace or self.namespace)
        return [e for e in found.items if e.involved_object.name == name]

    def rule(self, pattern: str, **kw: Any) -> None:
        """Kubelet behaviour for pods matching `pattern` (first match wins: put it first)."""
        self.kubelet.rules.insert(0, Rule(pattern=pattern, **kw))

    def terminate(self, pod: str, exit_code: int = 0) -> None:
        self.kubelet.terminate(self.namespace, pod, exit_code=exit_code)


@contextmanager
def open_cluster(
    control_plane: ControlPlane, namespace: str, registry: KindRegistry, tmp: Path
) -> Iterator[Cluster]:
    """`namespace` created, with a kubelet stand-in, a proxy and a pod-creation watch, all
    stopped (and the namespace deleted) when the block ends."""
    control_plane.ensure_namespace(namespace)
    kubeconfig = control_plane.kubeconfig_for(
        control_plane.admin_token, tmp / "kubeconfig", namespace=namespace
    )
    creations = PodCreations(control_plane.rest, namespace)
    with (
        Kubelet(control_plane, namespace=namespace) as kubelet,
        FaultProxy.for_control_plane(control_plane) as proxy,
    ):
        cluster = Cluster(control_plane, namespace, kubelet, registry, proxy, kubeconfig, creations)
        try:
            yield cluster
        finally:
            creations.stop()
            for extra in cluster.proxies:
                extra.stop()
            cluster.api.close()
    delete_namespace(control_plane, namespace)


def test_options(**overrides: Any) -> Options:
    """Fast, isolated defaults: ephemeral ports (metrics over plain HTTP: test_op_metrics_auth.py
    tests the secure default), no client limit, short watches and leases."""
    base: dict[str, Any] = dict(
        metrics_bind_address="127.0.0.1:0",
        metrics_secure=False,
        health_probe_bind_address="127.0.0.1:0",
        kube_api_qps=-1,
        watch_timeout=30,
        watch_read_timeout=10,
        cache_sync_timeout=30,
        lease=LeaseTimings(3.0, 2.0, 0.3),
        webhook=WebhookOptions(port=0),
    )
    base.update(overrides)
    return Options(**base)


test_options.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


class RunningOperator:
    """A Manager on a thread, watching the cluster's namespace through `proxy` (default: the
    cluster's) as `token` (default: the admin); `stop()` shuts it down and returns its exit
    code."""

    def __init__(
        self,
        cluster: Cluster,
        proxy: FaultProxy | None = None,
        token: str | None = None,
        **overrides: Any,
    ) -> None:
        overrides.setdefault("namespace", cluster.namespace)
        self.proxy = proxy or cluster.proxy
        self.api = self.proxy.api_client(token or cluster.control_plane.admin_token)
        self.manager = Manager(test_options(**overrides), cluster.registry, api_client=self.api)
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="manager")
        self.thread.start()

    def _run(self) -> None:
        self.exit_code = self.manager.run()

    def wait_started(self, timeout: float = 30.0) -> RunningOperator:
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
        self.api.close()
        return self.exit_code


def operator_process(
    cluster: Cluster, *flags: str, proxy: FaultProxy | None = None
) -> subprocess.Popen[bytes]:
    """`python -m trainop_core.operator` on the cluster's namespace, through `proxy` (default:
    the cluster's)."""
    proxy = proxy or cluster.proxy
    kubeconfig = proxy.kubeconfig_for(
        cluster.control_plane.admin_token,
        cluster.kubeconfig.with_name(f"proxy-{proxy.url.rsplit(':', 1)[1]}.kubeconfig"),
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [
        sys.executable,
        "-m",
        "trainop_core.operator",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        cluster.namespace,
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
        "--webhook-server-port",
        "0",
        *flags,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
