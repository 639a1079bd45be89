"""The real control plane for every Kubernetes-facing suite: fixtures and helpers.

One kube-apiserver + etcd + kube-controller-manager (garbage collector and namespace controllers)
per test session, with the project's CRDs installed; each test gets a fresh namespace, deleted
afterwards. Registered for every suite by ``tests/conftest.py``. Fixtures:

* ``control_plane`` (session): the started :class:`ControlPlane`, CRDs of the built-in kinds
  installed. Missing binaries FAIL the test with the command that builds them.
* ``k8s_namespace``: a fresh namespace's name (``<test name>-<random>``).
* ``k8s_kubelet``: a :class:`Kubelet` on that namespace only, no rules (pods stay Pending until
  driven); give it rules with ``k8s_kubelet.rules[:] = [Rule(...)]``.
* ``k8s``: a :class:`K8s` bundling the above, with ``operator(...)`` to run the in-process operator
  on the namespace (as admin, or as whoever a token authenticates).
* ``k8s_proxy``: a :class:`FaultProxy` in front of the session's control plane (faults, counters).
* ``compactable_plane`` (session, started on first use): a second control plane without the watch
  cache or kube-controller-manager, where ``compact_etcd()`` makes a real 410 Gone, and where no
  PodGroup CRD is ever installed.

The session's control plane serves the PodGroup CRDs of both gang schedulers (Volcano and
scheduler-plugins) from the start, so kube-controller-manager's garbage collector knows them.
"""

from __future__ import annotations

import http.client
import re
import secrets
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainop_core.crds import all_crds
from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.testing.controlplane import ControlPlane, ControlPlaneError
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Kubelet
from trainop_core.testing.rest import Rest, RestError

TRAINER_RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
#: gang scheduler name -> the (group, version) of its PodGroup CRD
PODGROUP_APIS = {
    "volcano": ("scheduling.volcano.sh", "v1beta1"),
    "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1"),
}


def fast_operator_options(namespace: str, **overrides: Any) -> Any:
    """Operator options for tests: no ports, no client rate limit, this namespace only."""
    from trainop_core.operator.options import Options
    from trainop_core.operator.webhook.options import WebhookOptions

    base: dict[str, Any] = dict(
        namespace=namespace,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        kube_api_qps=-1,
        cache_sync_timeout=30,
        webhook=WebhookOptions(port=0),
    )
    base.update(overrides)
    return Options(**base)


@dataclass
class K8s:
    """One test's share of the session's control plane."""

    control_plane: ControlPlane
    namespace: str
    registry: KindRegistry
    kubelet: Kubelet

    @property
    def rest(self) -> Rest:
        """Raw JSON client as the admin."""
        return self.control_plane.rest

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (for kubectl and subprocesses)."""
        return self.control_plane.kubeconfig

    def kubeconfig_here(self, path: Path, token: str | None = None) -> Path:
        """A kubeconfig whose context's namespace is this test's (admin unless `token`)."""
        cp = self.control_plane
        return cp.kubeconfig_for(token or cp.admin_token, path, namespace=self.namespace)

    def api_client(self, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` (admin unless `token`)."""
        return self.control_plane.api_client(token)

    @contextmanager
    def operator(
        self, token: str | None = None, proxy: FaultProxy | None = None, **options: Any
    ) -> Iterator[Any]:
        """The in-process operator (a Manager on a thread) watching this namespace, for the
        length of a ``with`` block, through `proxy` if given; `options` override
        :func:`fast_operator_options`."""
        from clusters import running_operator

        opts = fast_operator_options(self.namespace, **options)
        if proxy is not None:
            client = proxy.api_client(token or self.control_plane.admin_token)
        else:
            client = self.api_client(token)
        try:
            with running_operator(client, self.registry, opts) as manager:
                yield manager
        finally:
            client.close()

    def install_trainer(self) -> None:
        """Trainer v2's CRDs and the default ClusterTrainingRuntimes as trainop ships them
        (cluster-wide: a runtime an earlier test installed is kept)."""
        import yaml

        from trainop_core.runtimes.crds import trainer_crds

        self.control_plane.install_crds(trainer_crds())
        runtimes = Path(__file__).resolve().parents[1] / "operator" / "trainer" / "runtimes"
        for path in sorted(runtimes.glob("*.yaml")):
            try:
                self.rest.create(TRAINER_RUNTIMES, yaml.safe_load(path.read_text()))
            except RestError as err:
                if err.status != 409:
                    raise

    def job_path(self, plural: str, name: str = "") -> str:
        from trainop_core.api.job import GROUP, VERSION

        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{plural}"
        return f"{base}/{name}" if name else base


def pod_group_crd(group: str, version: str) -> dict[str, Any]:
    """A PodGroup CRD as a gang scheduler installs it (schema: anything goes)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup",
                      "listKind": "PodGroupList"},
            "versions": [{"name": version, "served": True, "storage": True,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip


def start_control_plane(
    registry: KindRegistry, *, pod_groups: bool = False, **kwargs: Any
) -> ControlPlane:
    """A started control plane with `registry`'s CRDs (and the PodGroup CRDs); a missing binary
    fails the test."""
    crds = all_crds(registry.kinds)
    if pod_groups:
        crds += [pod_group_crd(*api) for api in PODGROUP_APIS.values()]
    try:
        return ControlPlane(crds=crds, **kwargs).start()
    except ControlPlaneError as exc:
        failure = str(exc)
    pytest.fail(f"the real Kubernetes control plane did not start:\n{failure}", pytrace=False)


def namespace_name(test_name: str) -> str:
    """A valid, unique namespace name that still says which test made it."""
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:50].strip("-")
    return f"{base or 't'}-{secrets.token_hex(3)}"


def delete_namespace(cp: ControlPlane, namespace: str) -> None:
    """Delete `namespace` without waiting; its pods first, for good (no kubelet may be left to
    finish their graceful deletion), so the namespace controller can remove it."""
    force = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    try:
        cp.rest.delete(f"/api/v1/namespaces/{namespace}/pods", force)
        cp.rest.delete(f"/api/v1/namespaces/{namespace}")
    except RestError as err:
        if err.status != 404:
            raise


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    cp = start_control_plane(build_registry(entry_points=False), pod_groups=True)
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def compactable_plane() -> Iterator[ControlPlane]:
    cp = start_control_plane(
        build_registry(entry_points=False), controller_manager=False, watch_cache=False
    )
    yield cp
    cp.stop()


@pytest.fixture
def k8s_proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy.for_control_plane(control_plane) as proxy:
        yield proxy


@pytest.fixture
def k8s_namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    control_plane.ensure_namespace(name)
    yield name
    delete_namespace(control_plane, name)


@pytest.fixture
def k8s_kubelet(control_plane: ControlPlane, k8s_namespace: str) -> Iterator[Kubelet]:
    with Kubelet(control_plane, namespace=k8s_namespace) as kubelet:
        yield kubelet


@pytest.fixture
def k8s(
    control_plane: ControlPlane, k8s_namespace: str, k8s_kubelet: Kubelet, registry: KindRegistry
) -> K8s:
    return K8s(control_plane, k8s_namespace, registry, k8s_kubelet)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak",
        action="store_true",
        help="run the soak variants against the real control plane (an idle operator 10.5 min)",
    )


@pytest.fixture
def idle_seconds(request: pytest.FixtureRequest) -> float:
    """How long an idle-operator test waits: 12 s, or with --soak 630 s (10.5 min: every
    default 20-40 s watch ends many times, and idle resources get their once-a-minute bookmarks)."""
    return 630.0 if request.config.getoption("--soak") else 12.0


def scrape(port: int, ca_pem: bytes, token: str | None) -> tuple[int, str]:
    """GET https://127.0.0.1:`port`/metrics as a Prometheus with `token` would, verifying the
    server against `ca_pem`: the status and the body."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request(
            "GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {}
        )
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()
