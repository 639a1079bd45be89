"""KFP tests: kfp must be installed. Jobs run on the real local backend in a private TRAINOP_HOME;
every process a test starts (kfp.local's executor, supervisors, replicas) carries a tag in its
environment, so a test can prove none is left. kfp.local runs components in subprocesses of this
interpreter, so `trainop_core` and `trainop_kfp` are put on PYTHONPATH for them."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kfp_support import TAG

pytest.importorskip("kfp")

REPO = Path(__file__).resolve().parents[2]
KFP_SRC = REPO / "integrations" / "kfp"

for _path in (REPO, KFP_SRC):  # an editable install makes this a no-op
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture(autouse=True)
def trainop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Jobs of these tests never mix with anyone else's (~/.trainop is shared)."""
    home = tmp_path / "trainop-home"
    monkeypatch.setenv("TRAINOP_HOME", str(home))
    parts = [str(REPO), str(KFP_SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(parts))
    return home


@pytest.fixture
def tag(monkeypatch: pytest.MonkeyPatch) -> str:
    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG, value)
    return value


@pytest.fixture
def kfp_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """kfp.local with the subprocess runner in this interpreter; yields the pipeline root.

    Each component's own install steps run too (kfp, then trainop from the wheel the command
    carries, then trainop's requirements) in this environment, where all are installed already:
    no package index may be asked, so a missing or different version fails the test, and the
    installed trainop must be left as it was (never replaced by the embedded wheel)."""
    from kfp import local

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    installed = importlib.metadata.distribution("trainop").read_text("RECORD")

    root = tmp_path / "kfp-outputs"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    yield root
    assert importlib.metadata.distribution("trainop").read_text("RECORD") == installed
