"""Fixtures for the local backend: a private TRAINOP_HOME per test, a client on it, and a check
that no process of the test outlives it (every process it starts carries a tag in its env)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_helpers import TAG, leftovers

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient


@pytest.fixture
def tag(monkeypatch: pytest.MonkeyPatch) -> str:
    value = uuid.uuid4().hex
    monkeypatch.setenv(TAG, value)
    return value


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trainop-home"
    monkeypatch.setenv("TRAINOP_HOME", str(path))
    return path


@pytest.fixture
def client(home: Path, tag: str) -> Iterator[TrainingClient]:
    client = TrainingClient(LocalBackend(home=home))
    yield client
    for job in client.list():
        client.delete(job.name, job.namespace)
    assert leftovers(tag, home) == [], "processes outlived their job"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
