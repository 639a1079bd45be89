"""Real Kueue admits trainop's jobs on the real control plane, with trainop's operator running.

Kueue (built from the Go module proxy, see tests/kueue/conftest.py) holds every job that carries
`kueue.x-k8s.io/queue-name` suspended until its ClusterQueue has quota, then admits it by clearing
`runPolicy.suspend` and writing its flavor's node labels and tolerations into each replica's pod
template; trainop's operator must honour all of that, report the conditions and replica counts
Kueue reads, and give back pods when Kueue suspends a job again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s import K8s
from kueuekit import (
    FLAVOR_LABEL,
    KINDS,
    TOLERATION_KEY,
    Admissions,
    PodLoad,
    Queues,
    is_true,
    job,
    job_path,
    owner_name,
    watching,
)

from trainop_core.testing.builders import wait_for
from trainop_core.testing.kubelet import Rule
from trainop_core.testing.kueue import API, Kueue

pytestmark = pytest.mark.kueue
QUOTA_MILLICORES = 2000


@pytest.fixture
def queues(k8s: K8s, kueue: Kueue) -> Iterator[Queues]:
    """A 2-CPU ClusterQueue (StrictFIFO, lower priorities preemptible) and LocalQueue `team`."""
    made = Queues(k8s.rest, k8s.namespace, cpu="2").create()
    wait_for(made.active, timeout=30, interval=0.1)
    yield made
    made.delete()


def workloads(k8s: K8s) -> list[dict]:
    return list(k8s.rest.get(f"{API}/namespaces/{k8s.namespace}/workloads")["items"])


def create(k8s: K8s, kind: str, body: dict) -> dict:
    return k8s.rest.create(job_path(k8s.namespace, kind), body)


def succeeded(k8s: K8s, kind: str, name: str) -> bool:
    return is_true(k8s.rest.get(job_path(k8s.namespace, kind, name)), "Succeeded")


def test_more_jobs_than_the_quota_holds_run_within_it_in_queue_order_and_all_succeed(
    k8s: K8s, queues: Queues
) -> None:
    # Two jobs of every kind, 1 CPU each, behind a blocker that holds the whole quota until all
    # of them wait in the queue: from then on Kueue admits strictly in its FIFO order.
    k8s.kubelet.rules[:] = [
        Rule("blocker-*", run_seconds=None),
        Rule("*-worker-*", run_seconds=0.2),  # workers end first: a job's end frees all its CPU
        Rule("*", run_seconds=1.5),
    ]
    load, admissions = PodLoad(), Admissions()
    pods = f"/api/v1/namespaces/{k8s.namespace}/pods"
    with (
        watching(k8s.rest, pods, load),
        watching(k8s.rest, f"{API}/namespaces/{k8s.namespace}/workloads", admissions),
        k8s.operator(),
    ):
        create(k8s, "PyTorchJob", job("PyTorchJob", "blocker", queues.local_queue, cpu=1000))
        wait_for(lambda: admissions.admitted() == ["blocker"], timeout=30, interval=0.05)
        names = {f"{kind.lower()}-{i}": kind for i in range(2) for kind in KINDS}
        for name, kind in names.items():
            stored = create(k8s, kind, job(kind, name, queues.local_queue))
            # Kueue's webhook suspended it at creation; trainop must create no pod for it yet.
            assert stored["spec"]["runPolicy"]["suspend"] is True, name
        wait_for(lambda: len(workloads(k8s)) == len(names) + 1, timeout=30, interval=0.05)
        queued = sorted(
            (w for w in workloads(k8s) if owner_name(w) != "blocker"),
            key=lambda w: (w["metadata"]["creationTimestamp"], w["metadata"]["uid"]),
        )
        for pod in ("blocker-worker-0", "blocker-master-0"):
            k8s.kubelet.terminate(k8s.namespace, pod, exit_code=0)
        for name, kind in names.items():
            wait_for(lambda: succeeded(k8s, kind, name), timeout=120, interval=0.1)  # noqa: B023

    assert load.peak <= QUOTA_MILLICORES, f"CPU in use peaked at {load.peak}m: {load.peak_pods}"
    assert admissions.admitted() == ["blocker", *(owner_name(w) for w in queued)]
    job_pods = [p for p in load.seen.values() if not p["metadata"]["name"].startswith("blocker")]
    assert len(job_pods) == 18  # 4 kinds x 2 jobs x 2 pods, and 2 single-pod JAXJobs: none twice
    for pod in job_pods:  # built from the templates Kueue wrote at admission
        assert pod["spec"].get("nodeSelector", {}).get(FLAVOR_LABEL) == queues.flavor
        assert TOLERATION_KEY in [t.get("key") for t in pod["spec"].get("tolerations", [])]
    # Kueue read each job's Running condition as "pods ready".
    assert admissions.pods_ready >= set(names)
