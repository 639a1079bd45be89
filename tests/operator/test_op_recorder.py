"""The event recorder: asynchronous, never blocking a reconcile, and not losing a burst."""

from __future__ import annotations

import pytest
from opkit import Cluster, wait_for

from trainop_core.operator.kube import EVENTS, KubeClient
from trainop_core.operator.recorder import EventRecorder


@pytest.fixture
def client(cluster: Cluster) -> KubeClient:
    return KubeClient(cluster.server.api_client(), qps=-1)


def job(name: str) -> dict[str, object]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta}


def test_a_burst_of_events_from_many_jobs_is_written_whole(
    cluster: Cluster, client: KubeClient
) -> None:
    """One operator records for every kind: 400 jobs x ~13 events arrive within seconds."""
    recorder = EventRecorder(client)
    burst = 3000
    for i in range(burst):
        recorder.record(job(f"j{i % 300}"), "Normal", "SuccessfulCreatePod", f"pod {i}", "c")
    wait_for(
        lambda: cluster.server.stats.requests.get(("create", "events"), 0) >= burst,
        timeout=30,
        what="every queued event written",
    )
    recorder.stop()
    written = client.list(EVENTS, "default")["items"]
    assert len(written) == burst
    assert {e["source"]["component"] for e in written} == {"c"}
    assert written[0]["involvedObject"]["kind"] == "PyTorchJob"
