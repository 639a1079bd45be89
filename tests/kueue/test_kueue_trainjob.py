"""Real Kueue's TrainJob integration (`trainer.kubeflow.org/trainjob`) with trainop's Trainer v2
CRDs and operator (`--enable-scheme TrainJob`), the kubelet stand-in running the pods.

Kueue computes a TrainJob's pod sets with Trainer's own runtime code from the runtime it names
(`runtimeRef` as the CRD defaults it: a TrainJob naming only its runtime, as Trainer's docs write
them), holds it suspended until its ClusterQueue has quota, then admits it by writing its flavor's
node labels and tolerations in a `runtimePatches` entry of manager `kueue.x-k8s.io/manager` and
clearing `spec.suspend`; to preempt it, it suspends it, waits until `jobsStatus` shows no active
job, and empties its patch. trainop's operator must follow each step with the pods it makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_trainjob
from k8s import K8s
from kueuekit import (
    FLAVOR_LABEL,
    TOLERATION_KEY,
    Admissions,
    PodLoad,
    Queues,
    admission_phases,
    condition,
    is_true,
    list_workloads,
    owner_name,
    running_pods,
    watching,
)

from trainop_core.testing.builders import wait_for
from trainop_core.testing.kubelet import Rule
from trainop_core.testing.kueue import API, QUEUE_LABEL

pytestmark = [pytest.mark.kueue, pytest.mark.timeout(1800)]  # Kueue may be built first
QUOTA_MILLICORES = 2000
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@pytest.fixture
def runtimes(k8s: K8s) -> None:
    """trainop's default runtimes on the cluster: Kueue reads the one a TrainJob names."""
    k8s.install_trainer()


def trainjob(name: str, queue: str, *, cpu: int, priority: str = "") -> dict[str, Any]:
    """Two nodes of `cpu` millicores on torch-distributed, naming only the runtime's name."""
    resources = {"requests": {"cpu": f"{cpu}m"}, "limits": {"cpu": f"{cpu}m"}}
    job = make_trainjob(name, "torch-distributed", trainer={
        "numNodes": 2, "command": ["python", "-c", "pass"], "resourcesPerNode": resources,
    })  # fmt: skip
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    if priority:
        job["metadata"]["labels"][PRIORITY_LABEL] = priority
    return job


def trainjobs_path(k8s: K8s, name: str = "") -> str:
    base = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{k8s.namespace}/trainjobs"
    return f"{base}/{name}" if name else base


def complete(k8s: K8s, name: str) -> bool:
    return is_true(k8s.rest.get(trainjobs_path(k8s, name)), "Complete")


def workloads(k8s: K8s) -> list[dict[str, Any]]:
    return list_workloads(k8s.rest, k8s.namespace)


def kueue_patch(job: dict[str, Any]) -> dict[str, Any]:
    patches = {p["manager"]: p for p in job["spec"].get("runtimePatches") or []}
    return patches[KUEUE_MANAGER]


def admitted_flavor(job: dict[str, Any]) -> str | None:
    """The flavor Kueue's patch puts on the nodes' pods (None: no admission in the patch)."""
    spec = kueue_patch(job)["trainingRuntimeSpec"]["template"]["spec"]
    for step in spec.get("replicatedJobs") or []:
        pod = step["template"]["spec"]["template"]
        return str(pod["spec"]["nodeSelector"][FLAVOR_LABEL])
    return None


@pytest.mark.usefixtures("runtimes")
def test_a_trainjob_naming_only_its_runtime_is_admitted_within_the_quota_and_run_by_trainop(
    k8s: K8s, queues: Queues
) -> None:
    k8s.kubelet.rules[:] = [Rule("first-*", run_seconds=None), Rule("*", run_seconds=0.5)]
    load, admissions = PodLoad(), Admissions()
    ns = k8s.namespace
    with (
        watching(k8s.rest, f"/api/v1/namespaces/{ns}/pods", load),
        watching(k8s.rest, f"{API}/namespaces/{ns}/workloads", admissions),
        k8s.operator(enable_schemes=("TrainJob",)),
    ):
        # Written as Trainer's docs write it: Kueue's webhook finds the runtime by the
        # apiGroup and kind the CRD defaults, suspends the job and adds its own patch.
        first = k8s.rest.create(trainjobs_path(k8s), trainjob("first", "team", cpu=1000))
        assert first["spec"]["runtimeRef"] == {
            "name": "torch-distributed",
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        }
        assert first["spec"]["suspend"] is True
        assert admitted_flavor(first) is None  # Kueue's own (still empty) patch is there
        wait_for(lambda: admissions.admitted() == ["first"], timeout=90, interval=0.05)
        first_pods = wait_for(lambda: running_pods(load, "first-", set()), timeout=60)
        assert first_pods == ["first-node-0", "first-node-1"]
        # The whole quota is held: the second waits, with no pod, for Kueue's reason.
        k8s.rest.create(trainjobs_path(k8s), trainjob("second", "team", cpu=500))

        def second_pending() -> str:
            for workload in workloads(k8s):
                found = condition(workload, "QuotaReserved")
                if owner_name(workload) == "second" and found and found["status"] == "False":
                    return str(found["message"])
            return ""

        assert "insufficient unused quota for cpu" in wait_for(second_pending, timeout=60)
        assert not [p for p in load.seen.values() if p["metadata"]["name"].startswith("second")]
        for pod in first_pods:
            k8s.kubelet.terminate(ns, pod, exit_code=0)
        wait_for(lambda: complete(k8s, "first"), timeout=60, interval=0.1)
        wait_for(lambda: complete(k8s, "second"), timeout=90, interval=0.1)

        def finished() -> dict[str, Any]:
            found = {owner_name(w): condition(w, "Finished") for w in workloads(k8s)}
            return found if all(found.get(n) for n in ("first", "second")) else {}

        ended = wait_for(finished, timeout=60, interval=0.1)  # Kueue read trainop's Complete
        second = k8s.rest.get(trainjobs_path(k8s, "second"))

    assert {n: c["reason"] for n, c in ended.items()} == {
        "first": "Succeeded",
        "second": "Succeeded",
    }
    assert load.peak <= QUOTA_MILLICORES, f"CPU in use peaked at {load.peak}m: {load.peak_pods}"
    assert admissions.admitted() == ["first", "second"]
    assert second["status"]["jobsStatus"][0]["succeeded"] == 1
    pods = sorted(load.seen.values(), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in pods] == [*first_pods, "second-node-0", "second-node-1"]
    for pod in pods:  # made from the runtime patch Kueue wrote at admission
        assert pod["spec"]["nodeSelector"][FLAVOR_LABEL] == queues.flavor
        assert TOLERATION_KEY in [t.get("key") for t in pod["spec"].get("tolerations", [])]


@pytest.fixture
def priorities(k8s: K8s) -> Iterator[dict[str, str]]:
    """WorkloadPriorityClasses `low` (100) and `high` (1000), named after the test's namespace
    (what Kueue reads from a TrainJob's `kueue.x-k8s.io/priority-class` label)."""
    path = f"{API}/workloadpriorityclasses"
    names = {level: f"{k8s.namespace}-{level}" for level in ("low", "high")}
    for level, value in (("low", 100), ("high", 1000)):
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                "metadata": {"name": names[level]}, "value": value}  # fmt: skip
        k8s.rest.create(path, body)
    yield names
    for name in names.values():
        k8s.rest.delete(f"{path}/{name}")


@pytest.mark.usefixtures("runtimes")
def test_a_higher_priority_trainjob_preempts_a_lower_one_which_runs_again_after(
    k8s: K8s, queues: Queues, priorities: dict[str, str]
) -> None:
    k8s.kubelet.rules[:] = [Rule("low-*", run_seconds=None), Rule("*", run_seconds=1.0)]
    load, admissions, versions = PodLoad(), Admissions(), []
    ns = k8s.namespace
    with (
        watching(k8s.rest, f"/api/v1/namespaces/{ns}/pods", load),
        watching(k8s.rest, f"{API}/namespaces/{ns}/workloads", admissions),
        watching(k8s.rest, trainjobs_path(k8s), lambda _, obj: versions.append(obj)),
        k8s.operator(enable_schemes=("TrainJob",)),
    ):
        low = trainjob("low", "team", cpu=1000, priority=priorities["low"])
        k8s.rest.create(trainjobs_path(k8s), low)
        first_pods = set(wait_for(lambda: running_pods(load, "low-", set()), timeout=90))
        first_uids = {u for u, p in load.seen.items() if p["metadata"]["name"] in first_pods}
        high = trainjob("high", "team", cpu=1000, priority=priorities["high"])
        k8s.rest.create(trainjobs_path(k8s), high)
        wait_for(lambda: complete(k8s, "high"), timeout=90, interval=0.1)
        again = wait_for(lambda: running_pods(load, "low-", first_uids), timeout=90)
        for pod in again:
            k8s.kubelet.terminate(ns, pod, exit_code=0)
        wait_for(lambda: complete(k8s, "low"), timeout=60, interval=0.1)

    assert load.peak <= QUOTA_MILLICORES, f"CPU in use peaked at {load.peak}m: {load.peak_pods}"
    assert admissions.admitted() == ["low", "high"]  # low's second admission is no new entry

    # Kueue's view of low over time: admitted (its flavor in the patch), suspended (then, once
    # trainop reported no active job, its patch emptied), admitted again; trainop's pods
    # followed each step.
    def patch(version: dict[str, Any], suspended: bool) -> None:
        assert suspended or admitted_flavor(version) == queues.flavor

    lows = [v for v in versions if v["metadata"]["name"] == "low"]
    phases = admission_phases(lows, lambda v: bool(v["spec"]["suspend"]), patch)
    assert phases == ["suspended", "admitted", "suspended", "admitted"]
    admitted = [i for i, v in enumerate(lows) if not v["spec"]["suspend"]]
    restored = [v for v in lows[admitted[0] : admitted[-1]] if admitted_flavor(v) is None]
    assert restored, "Kueue never emptied its patch of the preempted TrainJob"
    assert all(v["spec"]["suspend"] for v in restored)
    assert not any(s["active"] for s in restored[0]["status"]["jobsStatus"])
    evicted = [v for v in versions if v["metadata"]["name"] == "low" and is_true(v, "Suspended")]
    assert evicted, "trainop never reported the preempted TrainJob Suspended"
    assert all(not s["active"] for v in evicted for s in v["status"]["jobsStatus"])
    first = [load.seen[uid] for uid in first_uids]
    assert all(p["metadata"].get("deletionTimestamp") for p in first), "preempted pods kept"
    assert complete(k8s, "low")
