"""Fixtures for the process node's tests: one control plane with kube-scheduler, the node
lifecycle (a short grace) and two process nodes for the session, a namespace per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s import delete_namespace, namespace_name, start_control_plane
from nodekit import NodeCluster

from trainop_core.kinds.table import build_registry
from trainop_core.node.network import ClusterNetwork
from trainop_core.node.pki import KubeletPki
from trainop_core.testing.nodes import ProcessNodes, example_roots

#: seconds a silent node stays Ready (and pods tolerate its loss): short, for the failure test
NODE_MONITOR_GRACE = 6.0


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    pki = KubeletPki.create(tmp_path_factory.mktemp("kubelet-pki"))
    cp = start_control_plane(
        build_registry(entry_points=False),
        scheduler=True,
        node_monitor_grace=NODE_MONITOR_GRACE,
        kubelet_pki=pki,
        service_accounts=True,
    )
    images = example_roots(tmp_path_factory.mktemp("examples-image"))
    network = ClusterNetwork(cp.rest.connection)
    try:
        network.start()
        nodes = ProcessNodes(
            cp, 2, heartbeat=1.0, images=images, network=network, kubelet_pki=pki.directory
        )
        try:
            nodes.start()
            yield NodeCluster(cp, nodes)
        finally:
            nodes.stop()
    finally:
        network.stop()
        cp.stop()


@pytest.fixture
def ns(node_cluster: NodeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    node_cluster.cp.ensure_namespace(name)
    yield name
    delete_namespace(node_cluster.cp, name)


@pytest.fixture
def kubeconfig(node_cluster: NodeCluster, ns: str, tmp_path: Path) -> Path:
    """An admin kubeconfig whose default namespace is the test's."""
    cp = node_cluster.cp
    return cp.kubeconfig_for(cp.admin_token, tmp_path / "kubeconfig", namespace=ns)
