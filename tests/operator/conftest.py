"""Fixtures for the operator tests: a fake cluster per test (or per module) and operators on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from opkit import Cluster, RunningOperator, start_cluster, stop_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path)
    yield c
    stop_cluster(c)


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
