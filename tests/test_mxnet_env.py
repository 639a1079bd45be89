"""Tests that need the MXNet venv fail under CI when it cannot be built, and skip elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mxnet_env
import pytest


@pytest.fixture
def unbuildable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    script = tmp_path / "setup_venv.sh"
    script.write_text("echo 'no wheel for this platform' >&2\nexit 1\n")
    monkeypatch.setattr(mxnet_env, "SETUP", script)
    mxnet_env._build.cache_clear()
    yield
    mxnet_env._build.cache_clear()


@pytest.mark.usefixtures("unbuildable")
def test_an_unbuildable_venv_fails_the_test_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no wheel for this platform"):
        mxnet_env.mxnet_python()


@pytest.mark.usefixtures("unbuildable")
def test_an_unbuildable_venv_skips_the_test_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no wheel for this platform"):
        mxnet_env.mxnet_python()
