"""Watch semantics: resume, synthetic ADDED, 410 Gone, bookmarks, timeouts and selectors."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any
from urllib.parse import urlsplit

import pytest

from trainop_core.testing import ApiServer
from trainop_core.testing.builders import make_pod

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.exceptions.ApiException


def raw_watch(server: ApiServer, path: str, max_events: int = 100) -> list[dict[str, Any]]:
    """Read a watch stream to its end (or ``max_events``) as parsed JSON lines."""
    address = urlsplit(server.url)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    events = []
    try:
        while len(events) < max_events:
            line = response.readline()
            if not line:
                break
            events.append(json.loads(line))
    finally:
        conn.close()
    return events


def names(events: list[Any]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"].metadata.name) for e in events]


def test_watch_without_resource_version_starts_with_synthetic_added(
    core: Any, events_until_bookmark: Any
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "old"}})
    events = events_until_bookmark(core.list_namespaced_config_map, "default")
    assert names(events) == [("ADDED", "old")]


def test_watch_from_resource_version_sees_later_changes_in_order(core: Any) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    cm.data = {"k": "v"}
    core.replace_namespaced_config_map("a", "default", cm)
    core.delete_namespaced_config_map("a", "default")
    watch = kubernetes.watch.Watch()
    events = []
    for event in watch.stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
    ):
        events.append(event)
        if len(events) == 3:
            watch.stop()
    assert names(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


def test_live_events_reach_an_open_watch(core: Any) -> None:
    rv = core.list_namespaced_pod("default").metadata.resource_version
    watch, seen = kubernetes.watch.Watch(), []

    def consume() -> None:
        for event in watch.stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
        ):
            seen.append(event["type"])
            watch.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    core.create_namespaced_pod("default", make_pod("live"))
    thread.join(5)
    assert seen == ["ADDED"]


def test_watch_from_compacted_resource_version_is_410(server: ApiServer, core: Any) -> None:
    server.store.set_history_size(3)
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    events = raw_watch(
        server, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
    )
    assert events[0]["type"] == "ERROR"
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")
    with pytest.raises(ApiException) as err:
        list(
            kubernetes.watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=rv
            )
        )
    assert err.value.status == 410


def test_expire_history_fault_forces_410(server: ApiServer, core: Any) -> None:
    rv = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "a"}}
    ).metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    server.faults.expire_history()
    events = raw_watch(
        server, f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
    )
    assert events[0]["object"]["code"] == 410
    now = core.list_namespaced_config_map("default").metadata.resource_version
    fresh = raw_watch(
        server,
        f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={now}&timeoutSeconds=0.2",
    )
    assert fresh == []


def test_bookmarks_carry_the_current_resource_version(server: ApiServer, core: Any) -> None:
    rv = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "a"}}
    ).metadata.resource_version
    core.create_namespace({"metadata": {"name": "elsewhere"}})  # bumps the global RV
    events = raw_watch(
        server,
        f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=0.35",
    )
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    mark = events[0]["object"]
    assert mark["kind"] == "ConfigMap" and set(mark) == {"kind", "apiVersion", "metadata"}
    assert int(mark["metadata"]["resourceVersion"]) > int(rv)


def test_timeout_seconds_ends_the_stream(server: ApiServer) -> None:
    assert (
        raw_watch(
            server, "/api/v1/namespaces/default/pods?watch=1&resourceVersion=1&timeoutSeconds=1"
        )
        == []
    )


def test_object_leaving_the_selector_is_seen_as_deleted(
    core: Any, events_until_bookmark: Any
) -> None:
    core.create_namespaced_pod("default", make_pod("p", labels={"job": "a"}))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"job": "b"}}})
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"job": "a"}}})
    events = events_until_bookmark(
        core.list_namespaced_pod, "default", label_selector="job=a", resource_version=rv
    )
    assert names(events) == [("DELETED", "p"), ("ADDED", "p")]
    assert events[0]["object"].metadata.labels == {"job": "a"}


def test_field_selector_watch(core: Any, events_until_bookmark: Any) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod("default", make_pod(name))
    events = events_until_bookmark(
        core.list_namespaced_pod, "default", field_selector="metadata.name=b"
    )
    assert names(events) == [("ADDED", "b")]


def test_watch_prefix_path_and_all_namespaces(server: ApiServer, core: Any) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_config_map("other", {"metadata": {"name": "x"}})
    events = raw_watch(server, "/api/v1/watch/configmaps?timeoutSeconds=0.3")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "x")]


def test_streaming_list_ends_initial_events_with_an_annotated_bookmark(
    server: ApiServer, core: Any
) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    query = "watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
    events = raw_watch(server, f"/api/v1/namespaces/default/configmaps?{query}", max_events=2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
