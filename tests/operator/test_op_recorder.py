"""The event recorder: asynchronous, never blocking a reconcile, and not losing a burst; every
event accepted by the real kube-apiserver."""

from __future__ import annotations

import pytest
from opkit import Cluster, wait_for

from trainop_core.operator.kube import EVENTS, KubeClient
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
