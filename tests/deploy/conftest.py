"""Fixtures for the deployment assets' tests (helpers live in deploy_manifests.py)."""

from __future__ import annotations

import pytest
from deploy_manifests import KUSTOMIZATIONS, Manifest, kustomize


@pytest.fixture(params=KUSTOMIZATIONS)
def built(request: pytest.FixtureRequest) -> tuple[str, tuple[Manifest, ...]]:
    """(kustomization path, its manifests), for each kustomization."""
    return request.param, kustomize(request.param)
