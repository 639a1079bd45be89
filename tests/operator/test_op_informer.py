"""The shared informer against the real kube-apiserver (through the fault proxy): list, watch,
bookmarks, paging, deletes, and 410 Gone after a real etcd compaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from k8s import namespace_name
from opkit import Cluster, wait_for

from trainop_core.operator.informer import Informer, RestListWatch
from trainop_core.operator.kube import PODS, ApiError, KubeClient
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import FaultProxy

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
    api = cluster.proxy.api_client(cluster.control_plane.admin_token)
    return KubeClient(api, qps=-1, metrics=OperatorMetrics())


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


def start(
    client: KubeClient, namespace: str, stop: threading.Event, watch_timeout: float = 30, **kw: Any
) -> tuple[Informer, Recorder]:
    lw = RestListWatch(client, PODS, namespace, "training.kubeflow.org/job-name", **kw)
    informer, recorder = Informer("pods", lw, min_watch_timeout=watch_timeout), Recorder()
    informer.add_handler(recorder)
    informer.start(stop)
    assert informer.wait_synced(30)
    return informer, recorder


def test_lists_in_pages_then_watches_only_selected_objects(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    ns = cluster.namespace
    for i in range(5):
        client.create(PODS, ns, pod(f"p{i}"))
    client.create(PODS, ns, pod("unrelated", labelled=False))
    informer, recorder = start(client, ns, stop, page_size=2)
    assert sorted(o["metadata"]["name"] for o in informer.list()) == [f"p{i}" for i in range(5)]
    assert cluster.proxy.stats.requests[("list", "pods")] == 3  # 2 + 2 + 1
    client.create(PODS, ns, pod("p5"))
    client.delete(PODS, ns, "p0")
    wait_for(lambda: ("delete", "p0") in recorder.events and ("add", "p5") in recorder.events)
    assert informer.get(f"{ns}/p0") is None and informer.get(f"{ns}/p5") is not None


def test_an_index_keeps_no_entry_for_a_value_whose_objects_are_gone(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    """One owner per job: a job deleted must leave nothing behind in the owner index (an empty
    set per deleted job and informer grew the operator's memory with every job of a soak)."""
    ns = cluster.namespace
    lw = RestListWatch(client, PODS, ns, "training.kubeflow.org/job-name")
    informer = Informer("pods", lw, min_watch_timeout=30)
    informer.add_index("name", lambda obj: [obj["metadata"]["name"]])
    informer.start(stop)
    assert informer.wait_synced(30)
    for i in range(3):
        client.create(PODS, ns, pod(f"p{i}"))
    wait_for(lambda: len(informer.by_index("name", "p2")) == 1)
    for i in range(3):
        client.delete(PODS, ns, f"p{i}")
    wait_for(lambda: not informer.list())
    assert informer._indices["name"] == {}


def test_bookmarks_advance_the_resume_point_past_changes_the_selector_hides(
    cluster: Cluster, client: KubeClient, stop: threading.Event
) -> None:
    """kube-apiserver sends a BOOKMARK 2 s before a watch's timeout: a 4-8 s watch gets one."""
    ns = cluster.namespace
    informer, _ = start(client, ns, stop, watch_timeout=4)
    for i in range(5):  # changes the selector hides: only bookmarks tell the informer about them
        last = client.create(PODS, ns, pod(f"other-{i}", labelled=False))
    newest = int(last["metadata"]["resourceVersion"])
    wait_for(
        lambda: int(informer.last_resource_version) >= newest,
        what="a bookmark carried the newest resourceVersion",
    )
    assert informer.get(f"{ns}/other-4") is None
    watches = informer.watches
    cluster.proxy.cut_open_watches("pods")
    client.create(PODS, ns, pod("after"))
    wait_for(lambda: informer.get(f"{ns}/after"), what="watch resumed")
    assert informer.watches > watches and informer.lists == 1


def test_410_gone_after_compaction_relists_and_reports_what_changed_meanwhile(
    compactable_plane: ControlPlane, stop: threading.Event
) -> None:
    """A watch resumed from a resourceVersion etcd has compacted away gets a real 410."""
    cp, ns = compactable_plane, namespace_name("informer-410")
    cp.ensure_namespace(ns)
    with FaultProxy.for_control_plane(cp) as proxy:
        client = KubeClient(proxy.api_client(cp.admin_token), qps=-1)
        client.create(PODS, ns, pod("stays"))
        client.create(PODS, ns, pod("goes"))
        informer, recorder = start(client, ns, stop)
        wait_for(lambda: proxy.stats.open_watches == 1, what="the watch open")
        proxy.delay("watch", "pods", seconds=3)  # the re-watch waits while we change things
        assert proxy.cut_open_watches("pods") == 1
        client.delete(PODS, ns, "goes")
        client.create(PODS, ns, pod("new"))
        cp.compact_etcd()
        wait_for(lambda: informer.lists == 2, what="re-list after 410")
        wait_for(
            lambda: ("delete", "goes") in recorder.events and ("add", "new") in recorder.events
        )
        assert informer.get(f"{ns}/stays") is not None
        assert proxy.stats.requests[("list", "pods")] == 2
    cp.rest.delete(f"/api/v1/namespaces/{ns}")


def test_the_client_counts_requests_and_raises_typed_errors(
    cluster: Cluster, client: KubeClient
) -> None:
    client.create(PODS, cluster.namespace, pod("x"))
    with pytest.raises(ApiError) as err:
        client.create(PODS, cluster.namespace, pod("x"))
    assert err.value.already_exists and not err.value.conflict
    with pytest.raises(ApiError) as err:
        client.get(PODS, cluster.namespace, "missing")
    assert err.value.not_found
    assert client.metrics is not None
    assert client.metrics.rest_requests.value(verb="POST", code="409") == 1


def test_the_client_side_token_bucket_paces_requests(cluster: Cluster) -> None:
    import time

    slow = KubeClient(cluster.api, qps=20, burst=2)
    started = time.monotonic()
    for _ in range(6):
        slow.list(PODS, cluster.namespace)
    assert time.monotonic() - started >= 0.18  # 2 free, then 4 at 20 qps
