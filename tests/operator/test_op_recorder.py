"""The event recorder: asynchronous, never blocking a reconcile, and not losing a burst; every
event accepted by the real kube-apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from opkit import Cluster, wait_for

from trainop_core.operator.kube import EVENTS, KubeClient
from trainop_core.operator.ratelimit import TokenBucket
from trainop_core.operator.recorder import EventRecorder

# client-go's broadcaster queues 1,000 events and drops the rest; one operator recording for every
# kind meets bursts beyond that (400 jobs x ~13 events within seconds).
BURST = 1500


@pytest.fixture
def client(cluster: Cluster) -> KubeClient:
    return KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)


def job(namespace: str, name: str) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta}


def test_a_burst_of_events_from_many_jobs_is_written_whole(
    cluster: Cluster, client: KubeClient
) -> None:
    recorder = EventRecorder(client)
    for i in range(BURST):
        recorder.record(
            job(cluster.namespace, f"j{i % 300}"), "Normal", "SuccessfulCreatePod", f"pod {i}", "c"
        )
    wait_for(
        lambda: cluster.proxy.stats.requests[("create", "events")] >= BURST,
        timeout=120,
        what="every queued event written",
    )
    recorder.stop()
    assert cluster.proxy.stats.answers[("create", "events", 201)] == BURST
    written = client.list(EVENTS, cluster.namespace)["items"]
    assert len(written) == BURST
    assert {e["source"]["component"] for e in written} == {"c"}
    assert written[0]["involvedObject"]["kind"] == "PyTorchJob"


def written(client: KubeClient, name: str, namespace: str) -> list[dict[str, Any]]:
    items = client.list(EVENTS, namespace)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def requests(cluster: Cluster, verb: str) -> int:
    return int(cluster.proxy.stats.requests[(verb, "events")])


def test_a_repeated_event_raises_the_count_of_one_event(
    cluster: Cluster, client: KubeClient
) -> None:
    """As client-go's correlator: the planner repeats ExitedWithCode on every reconcile, the
    server keeps one Event whose count says how often (kubectl describe: "x3")."""
    recorder = EventRecorder(client)
    for _ in range(3):
        recorder.record(
            job(cluster.namespace, "j"), "Normal", "ExitedWithCode", "exited with code 0", "c"
        )
        wait_for(lambda: requests(cluster, "create") == 1, what="the first write")
    wait_for(lambda: written(client, "j", cluster.namespace)[0]["count"] == 3, what="count 3")
    recorder.stop()
    assert len(written(client, "j", cluster.namespace)) == 1
    assert requests(cluster, "create") + requests(cluster, "patch") <= 3


def test_occurrences_recorded_while_an_event_waits_cost_no_request(
    cluster: Cluster, client: KubeClient
) -> None:
    """While the bucket has no spare token, repeats fold into the queued write."""
    bucket = TokenBucket(qps=4, burst=1)
    assert bucket.try_take()  # the only token is gone: the writer waits ~0.25 s
    recorder = EventRecorder(client, bucket=bucket, patience=10)
    for _ in range(5):
        recorder.record(
            job(cluster.namespace, "j"), "Normal", "ExitedWithCode", "exited with code 0", "c"
        )
    wait_for(
        lambda: sum(e["count"] for e in written(client, "j", cluster.namespace)) == 5,
        what="5 counted",
    )
    recorder.stop()
    assert len(written(client, "j", cluster.namespace)) == 1
    assert requests(cluster, "create") == 1
    assert requests(cluster, "patch") <= 1


def test_ten_similar_events_are_combined_as_upstreams_recorder_does(
    cluster: Cluster, client: KubeClient
) -> None:
    recorder = EventRecorder(client)
    for i in range(12):
        message = f"Created pod: j-worker-{i}"
        recorder.record(job(cluster.namespace, "j"), "Normal", "SuccessfulCreatePod", message, "c")
    wait_for(
        lambda: sum(e["count"] for e in written(client, "j", cluster.namespace)) == 12,
        what="12 counted",
    )
    recorder.stop()
    events = sorted(written(client, "j", cluster.namespace), key=lambda e: e["count"])
    assert len(events) == 10
    combined = events[-1]
    assert combined["count"] == 3
    assert combined["message"] == "(combined from similar events): Created pod: j-worker-11"
    assert [e["count"] for e in events[:-1]] == [1] * 9


def test_the_recorder_remembers_a_bounded_number_of_events(
    cluster: Cluster, client: KubeClient
) -> None:
    """Past its cache (client-go: 4,096), a repeat of a forgotten event is a new Event."""
    recorder = EventRecorder(client, cache_size=2)
    for message in ("a", "b", "c"):
        recorder.record(job(cluster.namespace, "j"), "Normal", "Reason", message, "c")
        wait_for(
            lambda message=message: (
                message in {e["message"] for e in written(client, "j", cluster.namespace)}
            )
        )
    recorder.record(
        job(cluster.namespace, "j"), "Normal", "Reason", "c", "c"
    )  # remembered: its count goes up
    recorder.record(
        job(cluster.namespace, "j"), "Normal", "Reason", "a", "c"
    )  # forgotten: a second Event
    wait_for(lambda: len(written(client, "j", cluster.namespace)) == 4, what="a written again")
    wait_for(
        lambda: sum(e["count"] for e in written(client, "j", cluster.namespace)) == 5,
        what="5 counted",
    )
    recorder.stop()
    counts = sorted((e["message"], e["count"]) for e in written(client, "j", cluster.namespace))
    assert counts == [("a", 1), ("a", 1), ("b", 1), ("c", 2)]


def test_a_deleted_jobs_events_are_forgotten_at_once(cluster: Cluster, client: KubeClient) -> None:
    """Memory must not grow with deleted jobs: `forget` drops a job's correlation state (a repeat
    afterwards is a new Event, as after the LRU evicted it), and only that job's."""
    recorder = EventRecorder(client)
    for name in ("gone", "kept"):
        recorder.record(job(cluster.namespace, name), "Normal", "Reason", "m", "c")
    wait_for(lambda: requests(cluster, "create") == 2, what="both written")
    recorder.forget(cluster.namespace, "gone")
    for name in ("gone", "kept"):
        recorder.record(job(cluster.namespace, name), "Normal", "Reason", "m", "c")
    wait_for(lambda: len(written(client, "gone", cluster.namespace)) == 2, what="a new Event")
    wait_for(lambda: written(client, "kept", cluster.namespace)[0]["count"] == 2, what="count 2")
    recorder.stop()
    assert len(written(client, "kept", cluster.namespace)) == 1
