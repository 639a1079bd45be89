"""Fixtures for the fake API server's own tests: a server per test and official clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainop_core.testing import ApiServer, Kubelet

kubernetes = pytest.importorskip("kubernetes")
yaml = pytest.importorskip("yaml")

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> dict[str, Any]:
    """A YAML manifest from ``tests/testing/fixtures``."""
    return yaml.safe_load((FIXTURES / name).read_text())  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.1) as srv:
        yield srv


@pytest.fixture
def api_client(server: ApiServer) -> Iterator[Any]:
    client = server.api_client()
    yield client
    client.close()


@pytest.fixture
def core(api_client: Any) -> Any:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: Any) -> Any:
    return kubernetes.client.CustomObjectsApi(api_client)


@pytest.fixture
def crd(server: ApiServer, api_client: Any) -> dict[str, Any]:
    """The PyTorchJob CRD fixture, installed through the API."""
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    body = load_fixture("pytorchjob-crd.yaml")
    ext.create_custom_resource_definition(body, _preload_content=False)
    return body


@pytest.fixture
def kubelet(server: ApiServer) -> Iterator[Kubelet]:
    with Kubelet(server) as k:
        yield k


def _events_until_bookmark(list_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
    watch = kubernetes.watch.Watch()
    events = []
    stream = watch.stream(list_fn, *args, allow_watch_bookmarks=True, timeout_seconds=5, **kwargs)
    for event in stream:
        if event["type"] == "BOOKMARK":
            watch.stop()
            break
        events.append(event)
    return events


@pytest.fixture
def events_until_bookmark(server: ApiServer) -> Callable[..., list[Any]]:
    """Watch with the official client until the first BOOKMARK and return the events before it.

    The server only sends a bookmark when the watcher has nothing pending, so the result is
    exactly the events up to now (the fixture server bookmarks every 0.1 s).
    """
    return _events_until_bookmark
