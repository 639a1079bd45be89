"""The shared informer against the fake API server: list, watch, bookmarks, paging, 410, deletes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opkit import Cluster, wait_for

from trainop_core.operator.informer import Informer, RestListWatch
from trainop_core.operator.kube import PODS, ApiError, KubeClient
from trainop_core.operator.metrics import OperatorMetrics

Obj = dict[str, Any]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: Obj) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Obj) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))


@pytest.fixture
def client(cluster: Cluster) -> KubeClient:
    return KubeClient(cluster.server.api_client(), qps=-1, metrics=OperatorMetrics())


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def pod(name: str, labelled: bool = True) -> Obj:
    labels = {"training.kubeflow.org/job-name": "j"} if labelled else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def start(client: KubeClient, stop: threading.Event, **kw: Any) -> tuple[Informer, Recorder]:
    lw = RestListWatch(client, PODS, "default", "training.kubeflow.org/job-name", **kw)
    informer, recorder = Informer("pods", lw, min_watch_timeout=30), Recorder()
    informer.add_handler(recorder)
    informer.start(stop)
    assert informer.wait_synced(5)
    return informer, recorder


def test_lists_in_pages_then_watches_only_selected_objects(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    for i in range(5):
        client.create(PODS, "default", pod(f"p{i}"))
    client.create(PODS, "default", pod("unrelated", labelled=False))
    informer, recorder = start(client, stop, page_size=2)
    assert sorted(o["metadata"]["name"] for o in informer.list()) == [f"p{i}" for i in range(5)]
    assert cluster.server.stats.requests[("list", "pods")] == 3  # 2 + 2 + 1
    client.create(PODS, "default", pod("p5"))
    client.delete(PODS, "default", "p0")
    wait_for(lambda: ("delete", "p0") in recorder.events and ("add", "p5") in recorder.events)
    assert informer.get("default/p0") is None and informer.get("default/p5") is not None


def test_bookmarks_advance_the_resume_point_so_a_reconnect_needs_no_relist(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    informer, _ = start(client, stop)
    cluster.server.store.set_history_size(5)
    for i in range(20):  # changes the selector hides: only bookmarks tell the informer about them
        client.create(PODS, "default", pod(f"other-{i}", labelled=False))
    wait_for(
        lambda: informer.last_resource_version == str(cluster.server.store.resource_version),
        timeout=5,
        what="a bookmark carried the newest resourceVersion",
    )
    cluster.server.faults.cut_open_watches("pods")  # the list's RV is long out of history now
    client.create(PODS, "default", pod("after"))
    wait_for(lambda: informer.get("default/after"), what="watch resumed")
    assert informer.lists == 1


def test_410_gone_relists_and_reports_what_changed_meanwhile(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    client.create(PODS, "default", pod("stays"))
    client.create(PODS, "default", pod("goes"))
    cluster.server.bookmark_interval = 3600
    informer, recorder = start(client, stop)
    cluster.server.faults.fail("watch", "pods", code=500, count=1)
    cluster.server.faults.cut_open_watches("pods")
    client.delete(PODS, "default", "goes")
    client.create(PODS, "default", pod("new"))
    cluster.server.faults.expire_history()
    wait_for(lambda: informer.lists == 2, what="re-list after 410")
    wait_for(lambda: ("delete", "goes") in recorder.events and ("add", "new") in recorder.events)
    assert informer.get("default/stays") is not None


def test_the_client_counts_requests_and_raises_typed_errors(client: KubeClient) -> None:
    client.create(PODS, "default", pod("x"))
    with pytest.raises(ApiError) as err:
        client.create(PODS, "default", pod("x"))
    assert err.value.already_exists and not err.value.conflict
    with pytest.raises(ApiError) as err:
        client.get(PODS, "default", "missing")
    assert err.value.not_found
    assert client.metrics is not None
    assert client.metrics.rest_requests.value(verb="POST", code="409") == 1


def test_the_client_side_token_bucket_paces_requests(cluster: Cluster) -> None:
    import time

    slow = KubeClient(cluster.server.api_client(), qps=20, burst=2)
    started = time.monotonic()
    for _ in range(6):
        slow.list(PODS, "default")
    assert time.monotonic() - started >= 0.18  # 2 free, then 4 at 20 qps
