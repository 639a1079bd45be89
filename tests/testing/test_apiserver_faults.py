"""Fault injection as the official client sees it, and the request counters."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from trainop_core.testing import ApiServer
from trainop_core.testing.builders import make_pod, wait_for

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.exceptions.ApiException


@pytest.mark.parametrize(
    "code", [500, 409, 429], ids=["internal error", "conflict", "too many requests"]
)
def test_the_next_matching_request_fails_once(server: ApiServer, core: Any, code: int) -> None:
    server.faults.fail("create", "pods", code=code)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", make_pod("p"))
    assert err.value.status == code
    if code == 429:
        assert err.value.headers["Retry-After"] == "1"
    assert core.create_namespaced_pod("default", make_pod("p")).metadata.name == "p"


def test_faults_match_verb_resource_and_subresource(server: ApiServer, core: Any) -> None:
    core.create_namespaced_pod("default", make_pod("p"))
    server.faults.fail("patch", "pods/status", code=500, count=2)
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    core.read_namespaced_pod("p", "default")
    for _ in range(2):
        with pytest.raises(ApiException):
            core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})


def test_slow_responses(server: ApiServer, core: Any) -> None:
    server.faults.delay("list", "configmaps", seconds=0.3)
    start = time.monotonic()
    core.list_namespaced_config_map("default")
    assert time.monotonic() - start >= 0.3


def test_cutting_open_watches_ends_the_stream(server: ApiServer, core: Any) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    ended = threading.Event()

    def consume() -> None:
        response = core.list_namespaced_pod(
            "default", watch=True, resource_version=rv, _preload_content=False
        )
        try:
            for _ in response.stream():
                pass
        except ProtocolError:  # a cut connection may surface as ProtocolError
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    deadline = time.monotonic() + 5
    while server.stats.open_watches == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.faults.cut_open_watches("pods") == 1
    assert ended.wait(5)
    wait_for(lambda: server.stats.open_watches == 0)


def test_cut_watch_after_some_events(server: ApiServer, core: Any) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(4):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    server.faults.cut_watch("configmaps", after_events=2)
    seen: list[str] = []

    def consume() -> None:
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
        ):
            seen.append(event["object"].metadata.name)

    with pytest.raises(ProtocolError, match=r"ended prematurely|Connection broken"):
        consume()
    assert seen == ["cm-0", "cm-1"]


def test_failing_watch_requests(server: ApiServer, core: Any) -> None:
    server.faults.fail("watch", "pods", code=500)
    with pytest.raises(ApiException) as err:
        list(
            kubernetes.watch.Watch().stream(core.list_namespaced_pod, "default", timeout_seconds=1)
        )
    assert err.value.status == 500


def test_request_counters_by_verb_and_resource(server: ApiServer, core: Any) -> None:
    core.create_namespaced_pod("default", make_pod("p"))
    core.read_namespaced_pod("p", "default")
    core.list_namespaced_pod("default")
    core.read_namespaced_pod_status("p", "default")
    watch = kubernetes.watch.Watch()
    for _ in watch.stream(core.list_namespaced_pod, "default"):
        watch.stop()
    requests = server.stats.requests
    assert (
        requests[("create", "pods")],
        requests[("get", "pods")],
        requests[("list", "pods")],
    ) == (1, 1, 1)
    assert requests[("get", "pods/status")] == 1 and requests[("watch", "pods")] == 1
    assert server.stats.total_watches == 1 and server.stats.by_verb()["get"] == 2


def test_resuming_from_the_last_seen_version_after_a_cut_misses_nothing(
    server: ApiServer, core: Any, events_until_bookmark: Any
) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    server.faults.cut_watch("configmaps", after_events=1)
    seen: list[Any] = []

    def consume() -> None:
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
        ):
            seen.append(event)

    with pytest.raises(ProtocolError):
        consume()
    for name in ("during-1", "during-2"):
        core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    last = seen[-1]["object"].metadata.resource_version
    resumed = events_until_bookmark(
        core.list_namespaced_config_map, "default", resource_version=last
    )
    names = [e["object"].metadata.name for e in seen + resumed]
    assert names == ["before", "during-1", "during-2"]
