"""Shared fixtures. Keep this small: builders live in tests/builders.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry, build_registry

# The real control plane's fixtures (control_plane, k8s_namespace, k8s_kubelet, k8s): tests/k8s.py
pytest_plugins = ["k8s"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `soak` (half an hour or more) run only when -m names them: `pytest -m soak`."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    soaks = [item for item in items if item.get_closest_marker("soak") is not None]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


@pytest.fixture
def registry() -> KindRegistry:
    """A fresh kind registry with the built-in kinds only (no entry points)."""
    return build_registry(entry_points=False)


@pytest.fixture
def kinds(registry: KindRegistry) -> dict[str, Kind]:
    """Built-in kinds by name."""
    return {kind.kind: kind for kind in registry.kinds}


@pytest.fixture(scope="session")
def mxnet_venv() -> Path:
    """The interpreter of examples/mxnet/.venv (tests marked `mxnet`); see tests/mxnet_env.py:
    a test needing it fails under CI, and is skipped elsewhere, when it cannot be built."""
    from mxnet_env import mxnet_python

    return mxnet_python()
