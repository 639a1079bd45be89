"""The real kube-apiserver (the session's control plane), a fresh namespace per test, and a
backend on it that reaches the server through a fault proxy, with a kubeconfig whose context's
namespace is the test's.

Tests that do not run the operator use `backend_cluster.Cluster` to play its part.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backend_cluster import Cluster

from trainop_core.backends.kubernetes import KubernetesBackend
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Kubelet


@pytest.fixture
def cluster(
    control_plane: ControlPlane, k8s_namespace: str, k8s_kubelet: Kubelet, registry: KindRegistry
) -> Cluster:
    return Cluster(control_plane, k8s_namespace, registry, k8s_kubelet)


@pytest.fixture
def kubeconfig(
    k8s_proxy: FaultProxy, control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> Path:
    """The admin, through the proxy, in the test's namespace."""
    return k8s_proxy.kubeconfig_for(
        control_plane.admin_token, tmp_path / "kubeconfig", namespace=k8s_namespace
    )


@pytest.fixture
def backend(kubeconfig: Path, registry: KindRegistry) -> KubernetesBackend:
    return KubernetesBackend(kubeconfig=kubeconfig, registry=registry, delete_timeout=30)
