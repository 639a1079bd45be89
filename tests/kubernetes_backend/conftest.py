"""A real HTTP API server per test (trainop_core.testing), the CRDs applied, and a backend on it.

Tests that do not run the operator use `backend_cluster.Cluster` to play its part.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backend_cluster import Cluster
from clusters import install_crds

from trainop_core.backends.kubernetes import KubernetesBackend
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.testing import ApiServer, Kubelet


@pytest.fixture
def registry() -> KindRegistry:
    return build_registry(entry_points=False)


@pytest.fixture
def kinds(registry: KindRegistry) -> dict[str, Kind]:
    return {k.kind: k for k in registry.kinds}


@pytest.fixture
def server(registry: KindRegistry) -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.2) as srv:
        install_crds(srv, registry)
        yield srv


@pytest.fixture
def kubelet(server: ApiServer) -> Iterator[Kubelet]:
    with Kubelet(server) as k:
        yield k


@pytest.fixture
def cluster(server: ApiServer, kubelet: Kubelet, registry: KindRegistry) -> Cluster:
    return Cluster(server, kubelet, registry)


@pytest.fixture
def kubeconfig(server: ApiServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def backend(kubeconfig: Path, registry: KindRegistry) -> KubernetesBackend:
    return KubernetesBackend(kubeconfig=kubeconfig, registry=registry, delete_timeout=10)
