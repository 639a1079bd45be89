"""Flyte tests: flytekit must be installed; local jobs live in a private TRAINOP_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flytekit")


@pytest.fixture(autouse=True)
def trainop_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Jobs of these tests never mix with anyone else's (~/.trainop is shared)."""
    home = tmp_path_factory.mktemp("trainop-home")
    monkeypatch.setenv("TRAINOP_HOME", str(home))
    yield home
