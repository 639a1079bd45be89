"""Fixtures for the operator tests: a namespace of the real control plane per test (see opkit)
and operators on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from k8s import namespace_name
from opkit import Cluster, RunningOperator, open_cluster

from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane


@pytest.fixture
def cluster(
    control_plane: ControlPlane,
    registry: KindRegistry,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[Cluster]:
    with open_cluster(control_plane, namespace_name(request.node.name), registry, tmp_path) as c:
        yield c


@pytest.fixture
def run_operator(cluster: Cluster) -> Iterator[Callable[..., RunningOperator]]:
    """Start operators (Manager objects on threads) on `cluster`; all stopped at teardown."""
    started: list[RunningOperator] = []

    def start(**overrides: Any) -> RunningOperator:
        op = RunningOperator(cluster, **overrides)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
