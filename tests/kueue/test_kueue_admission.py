"""Real Kueue admits trainop's jobs on the real control plane, with trainop's operator running.

Kueue (built from the Go module proxy, see tests/kueue/conftest.py) holds every job that carries
`kueue.x-k8s.io/queue-name` suspended until its ClusterQueue has quota, then admits it by clearing
`runPolicy.suspend` and writing its flavor's node labels and tolerations into each replica's pod
template; trainop's operator must honour all of that, report the conditions and replica counts
Kueue reads, and give back pods when Kueue suspends a job again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from k8s import K8s
from kueuekit import (
    FLAVOR_LABEL,
    KINDS,
    TOLERATION_KEY,
    Admissions,
    PodLoad,
    Queues,
    admission_phases,
    condition,
    is_true,
    job,
    job_path,
    list_workloads,
    owner_name,
    running_pods,
    watching,
)

from trainop_core.testing.builders import wait_for
from trainop_core.testing.kubelet import Rule
from trainop_core.testing.kueue import API, Kueue

# The first test's setup builds Kueue on a machine that has none yet (about 4.5 minutes cold on
# 2 cores, more under load): more than the default 600 s budget must be left for it.
pytestmark = [pytest.mark.kueue, pytest.mark.timeout(1800)]
QUOTA_MILLICORES = 2000
ROOT = Path(__file__).resolve().parents[2]


def workloads(k8s: K8s) -> list[dict]:
    return list_workloads(k8s.rest, k8s.namespace)


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
        wait_for(lambda: admissions.admitted() == ["blocker"], timeout=60, interval=0.05)
        names = {f"{kind.lower()}-{i}": kind for i in range(2) for kind in KINDS}
        for name, kind in names.items():
            stored = create(k8s, kind, job(kind, name, queues.local_queue))
            # Kueue's webhook suspended it at creation; trainop must create no pod for it yet.
            assert stored["spec"]["runPolicy"]["suspend"] is True, name
            # Kueue's FIFO orders by creation time, which the API stores to the second: the next
            # job is created in a later second, so the order Kueue must follow is one order.
            second = int(time.time())
            wait_for(lambda: int(time.time()) > second, timeout=5, interval=0.05)  # noqa: B023
        wait_for(lambda: len(workloads(k8s)) == len(names) + 1, timeout=60, interval=0.05)
        queued = sorted(
            (w for w in workloads(k8s) if owner_name(w) != "blocker"),
            key=lambda w: (w["metadata"]["creationTimestamp"], w["metadata"]["uid"]),
        )
        for pod in ("blocker-worker-0", "blocker-master-0"):
            k8s.kubelet.terminate(k8s.namespace, pod, exit_code=0)
        for name, kind in names.items():
            wait_for(lambda: succeeded(k8s, kind, name), timeout=120, interval=0.1)  # noqa: B023

    assert load.peak <= QUOTA_MILLICORES, f"CPU in use peaked at {load.peak}m: {load.peak_pods}"
    stamps = [w["metadata"]["creationTimestamp"] for w in queued]
    assert len(set(stamps)) == len(stamps), stamps  # one order, not ties broken by uid
    assert admissions.admitted() == ["blocker", *(owner_name(w) for w in queued)]
    job_pods = [p for p in load.seen.values() if not p["metadata"]["name"].startswith("blocker")]
    assert len(job_pods) == 18  # 4 kinds x 2 jobs x 2 pods, and 2 single-pod JAXJobs: none twice
    for pod in job_pods:  # built from the templates Kueue wrote at admission
        assert pod["spec"].get("nodeSelector", {}).get(FLAVOR_LABEL) == queues.flavor
        assert TOLERATION_KEY in [t.get("key") for t in pod["spec"].get("tolerations", [])]


@pytest.fixture
def priorities(k8s: K8s) -> Iterator[dict[str, str]]:
    """PriorityClasses `low` (100) and `high` (1000), named after the test's namespace."""
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    names = {level: f"{k8s.namespace}-{level}" for level in ("low", "high")}
    for level, value in (("low", 100), ("high", 1000)):
        k8s.rest.create(path, {"metadata": {"name": names[level]}, "value": value})
    yield names
    for name in names.values():
        k8s.rest.delete(f"{path}/{name}")


def flavor_of(job_obj: dict, rtype: str) -> str | None:
    template = job_obj["spec"]["pytorchReplicaSpecs"][rtype]["template"]
    return (template.get("spec", {}).get("nodeSelector") or {}).get(FLAVOR_LABEL)


def test_a_higher_priority_job_preempts_a_lower_one_suspended_restored_readmitted_succeeding(
    k8s: K8s, queues: Queues, priorities: dict[str, str]
) -> None:
    k8s.kubelet.rules[:] = [Rule("low-*", run_seconds=None), Rule("*", run_seconds=1.0)]
    load, admissions, versions = PodLoad(), Admissions(), []
    ns = k8s.namespace
    low_path = job_path(ns, "PyTorchJob", "low")
    with (
        watching(k8s.rest, f"/api/v1/namespaces/{ns}/pods", load),
        watching(k8s.rest, f"{API}/namespaces/{ns}/workloads", admissions),
        watching(k8s.rest, job_path(ns, "PyTorchJob"), lambda _, obj: versions.append(obj)),
        k8s.operator(),
    ):
        low = job("PyTorchJob", "low", queues.local_queue, cpu=1000, priority=priorities["low"])
        create(k8s, "PyTorchJob", low)

        def low_running() -> dict | None:
            stored = k8s.rest.get(low_path)
            active = {
                r: s.get("active")
                for r, s in stored.get("status", {}).get("replicaStatuses", {}).items()
            }
            return (
                stored
                if is_true(stored, "Running") and active == {"Master": 1, "Worker": 1}
                else None
            )

        wait_for(low_running, timeout=60, interval=0.05)
        # Kueue reads trainop's Running condition as "pods ready" (waitForPodsReady is on).
        wait_for(lambda: "low" in admissions.pods_ready, timeout=60, interval=0.05)
        first_pods = {
            uid for uid, p in load.seen.items() if p["metadata"]["name"].startswith("low-")
        }
        assert len(first_pods) == 2

        high = job("PyTorchJob", "high", queues.local_queue, cpu=1000, priority=priorities["high"])
        create(k8s, "PyTorchJob", high)
        wait_for(lambda: succeeded(k8s, "PyTorchJob", "high"), timeout=60, interval=0.1)

        again = wait_for(lambda: running_pods(load, "low-", first_pods), timeout=60, interval=0.05)
        for pod in sorted(again, reverse=True):
            k8s.kubelet.terminate(ns, pod, exit_code=0)  # worker first, then master
        wait_for(lambda: succeeded(k8s, "PyTorchJob", "low"), timeout=60, interval=0.1)

    assert load.peak <= QUOTA_MILLICORES, f"CPU in use peaked at {load.peak}m: {load.peak_pods}"
    assert admissions.admitted() == ["low", "high"]  # low's second admission is not a new entry
    lows = [v for v in versions if v["metadata"]["name"] == "low"]

    # Kueue's view of low over time: admitted (flavor in the templates), suspended with its
    # templates restored, admitted again; trainop's pods followed each step.
    def templates(version: dict, suspended: bool) -> None:
        flavors = {flavor_of(version, r) for r in ("Master", "Worker")}
        assert flavors == ({None} if suspended else {queues.flavor}), (suspended, flavors)

    phases = admission_phases(
        lows, lambda v: bool(v["spec"]["runPolicy"].get("suspend")), templates
    )
    assert phases == ["suspended", "admitted", "suspended", "admitted"]
    evicted = [v for v in lows if is_true(v, "Suspended") and v["status"].get("startTime")]
    assert evicted, "trainop never reported the preempted job Suspended"
    assert all(
        not s.get("active")
        for v in evicted
        for s in v["status"].get("replicaStatuses", {}).values()
    )
    first = [load.seen[uid] for uid in first_pods]
    assert all(p["metadata"].get("deletionTimestamp") for p in first), "preempted pods not deleted"
    assert is_true(k8s.rest.get(low_path), "Succeeded")


def trainop_get(k8s: K8s, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(k8s.kubeconfig), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "trainop_core", "get", *args, "--backend", "kubernetes"]
    return subprocess.run(
        [*command, "-n", k8s.namespace], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_job_bigger_than_the_quota_stays_pending_and_trainop_get_shows_kueues_reason(
    k8s: K8s, queues: Queues
) -> None:
    k8s.kubelet.rules[:] = [Rule("*", run_seconds=None)]
    ns = k8s.namespace
    with k8s.operator():
        # In this order, so that StrictFIFO never puts the job that cannot fit ahead of it.
        create(k8s, "TFJob", job("TFJob", "fits", queues.local_queue))
        create(k8s, "PyTorchJob", job("PyTorchJob", "big", queues.local_queue, cpu=2000))

        def kueue_reason() -> str:
            for workload in workloads(k8s):
                found = condition(workload, "QuotaReserved")
                if owner_name(workload) == "big" and found and found["status"] == "False":
                    return str(found["message"])
            return ""

        reason = wait_for(kueue_reason, timeout=60, interval=0.1)
        assert "insufficient quota for cpu" in reason
        fits = job_path(ns, "TFJob", "fits")
        wait_for(lambda: is_true(k8s.rest.get(fits), "Running"), timeout=60, interval=0.1)
        big = wait_for(
            lambda: (
                (b := k8s.rest.get(job_path(ns, "PyTorchJob", "big")))
                and is_true(b, "Suspended")
                and b
            ),
            timeout=30,
            interval=0.1,
        )
        # trainop saw it and created nothing: Kueue keeps it suspended, it has no pod.
        assert big["spec"]["runPolicy"]["suspend"] is True
        pods = k8s.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        assert sorted(p["metadata"]["name"] for p in pods) == ["fits-chief-0", "fits-worker-0"]

        listed = trainop_get(k8s)
        one = trainop_get(k8s, "big")

    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines() if line}
    assert rows["big"][2] == "Queued"
    assert rows["fits"][2] == "Running"
    expected = f"Pending: {' '.join(reason.split())}"
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line}
    assert lines["NAME"].split()[-1] == "MESSAGE"
    assert lines["big"].endswith(f"  {expected}")  # MESSAGE: Kueue's reason, on the job's row
    assert "Pending:" not in lines["fits"]
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines()[1].endswith(f"  {expected}")


def test_a_job_multikueue_manages_is_left_alone_while_the_next_one_runs_to_success(
    k8s: K8s, queues: Queues
) -> None:
    # MultiKueue marks the jobs it runs on a worker cluster with runPolicy.managedBy; on the
    # manager cluster the operator must neither start pods for them nor write their status.
    k8s.kubelet.rules[:] = [Rule("*", run_seconds=0.2)]
    ns = k8s.namespace
    elsewhere = job("XGBoostJob", "elsewhere", queues.local_queue)
    elsewhere["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue"}
    load = PodLoad()
    with watching(k8s.rest, f"/api/v1/namespaces/{ns}/pods", load), k8s.operator():
        create(k8s, "XGBoostJob", elsewhere)
        create(k8s, "XGBoostJob", job("XGBoostJob", "here", queues.local_queue))
        wait_for(lambda: succeeded(k8s, "XGBoostJob", "here"), timeout=60, interval=0.1)
        stored = k8s.rest.get(job_path(ns, "XGBoostJob", "elsewhere"))
    assert stored["spec"]["runPolicy"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert not (stored.get("status") or {}).get("conditions"), stored.get("status")
    assert sorted(p["metadata"]["name"] for p in load.seen.values()) == [
        "here-master-0",
        "here-worker-0",
    ]


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def admission_check(k8s: K8s) -> Iterator[str]:
    """An AdmissionCheck whose controller this test plays: it is Active at once."""
    name = f"check-{k8s.namespace.rsplit('-', 1)[-1]}"
    path = f"{API}/admissionchecks"
    check = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck"}
    check.update(metadata={"name": name}, spec={"controllerName": "test/check"})
    k8s.rest.create(path, check)
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "the test",
              "lastTransitionTime": now()}  # fmt: skip
    k8s.rest.patch(f"{path}/{name}/status", {"status": {"conditions": [active]}})
    yield name
    k8s.rest.delete(f"{path}/{name}")


def test_labels_and_annotations_an_admission_check_adds_reach_every_pod_of_the_admitted_job(
    k8s: K8s, kueue: Kueue, admission_check: str
) -> None:
    # An admission check (as a provisioning controller would) hands Kueue pod set updates with
    # labels, annotations, a node selector and tolerations; Kueue merges them into the job's
    # templates at admission and trainop's pods must carry them.
    k8s.kubelet.rules[:] = [Rule("*", run_seconds=0.2)]
    ns = k8s.namespace
    queues = Queues(k8s.rest, ns, cpu="2", admission_check=admission_check).create()
    wait_for(queues.active, timeout=60, interval=0.1)
    update = {
        "labels": {"trainop.testing/checked": "yes"},
        "annotations": {"trainop.testing/note": "provisioned by the check"},
        "nodeSelector": {"trainop.testing/pool": "checked"},
    }
    load = PodLoad()
    try:
        with watching(k8s.rest, f"/api/v1/namespaces/{ns}/pods", load), k8s.operator():
            create(k8s, "PyTorchJob", job("PyTorchJob", "checked", queues.local_queue))

            def pending_check() -> dict | None:
                for workload in workloads(k8s):
                    checks = (workload.get("status") or {}).get("admissionChecks") or []
                    if is_true(workload, "QuotaReserved") and [c["state"] for c in checks] == [
                        "Pending"
                    ]:
                        return workload
                return None

            workload = wait_for(pending_check, timeout=60, interval=0.1)
            waiting = trainop_get(k8s, "checked")
            ready = {
                "name": admission_check, "state": "Ready", "message": "provisioned",
                "lastTransitionTime": now(),
                "podSetUpdates": [{"name": "master", **update}, {"name": "worker", **update}],
            }  # fmt: skip
            k8s.rest.patch(
                f"{API}/namespaces/{ns}/workloads/{workload['metadata']['name']}/status",
                {"status": {"admissionChecks": [ready]}},
            )
            wait_for(lambda: succeeded(k8s, "PyTorchJob", "checked"), timeout=60, interval=0.1)
    finally:
        queues.delete()

    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.splitlines()[1].split()[2] == "Queued"
    header, row = waiting.stdout.splitlines()[:2]
    assert header.split()[-1] == "MESSAGE"
    assert row[header.index("MESSAGE") :].strip()  # Kueue's reason for holding it
    pods = list(load.seen.values())
    assert sorted(p["metadata"]["name"] for p in pods) == ["checked-master-0", "checked-worker-0"]
    for pod in pods:
        assert pod["metadata"]["labels"]["trainop.testing/checked"] == "yes"
        assert pod["metadata"]["annotations"]["trainop.testing/note"] == "provisioned by the check"
        assert pod["spec"]["nodeSelector"]["trainop.testing/pool"] == "checked"


def test_a_failed_job_is_finished_for_kueue_and_frees_its_quota_for_the_next(
    k8s: K8s, queues: Queues
) -> None:
    k8s.kubelet.rules[:] = [
        Rule("fails-*", run_seconds=0.2, exit_code=1),
        Rule("*", run_seconds=0.2),
    ]
    ns = k8s.namespace
    with k8s.operator():
        create(k8s, "PyTorchJob", job("PyTorchJob", "fails", queues.local_queue, cpu=1000))
        create(k8s, "PyTorchJob", job("PyTorchJob", "next", queues.local_queue, cpu=1000))
        wait_for(lambda: succeeded(k8s, "PyTorchJob", "next"), timeout=60, interval=0.1)
        failed = k8s.rest.get(job_path(ns, "PyTorchJob", "fails"))

        def both_finished() -> dict:
            found = {owner_name(w): condition(w, "Finished") for w in workloads(k8s)}
            return found if all(found.get(n) for n in ("fails", "next")) else {}

        # Kueue writes Finished on a workload shortly after the job's condition.
        finished = wait_for(both_finished, timeout=60, interval=0.1)
    assert is_true(failed, "Failed")
    # Kueue read trainop's Failed condition as "finished, unsuccessfully" and gave the quota on.
    assert finished["fails"] is not None and finished["fails"]["status"] == "True"
    assert finished["fails"]["reason"] == "Failed", finished["fails"]
    assert finished["next"] is not None and finished["next"]["reason"] == "Succeeded"
