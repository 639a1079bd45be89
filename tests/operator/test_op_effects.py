"""The applier: the only place a controller writes, checked against the real kube-apiserver
(through the fault proxy, whose counters show every request the applier sent)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import pytest
from opkit import Cluster

from trainop_core.api.types import JobStatus
from trainop_core.kinds.table import build_registry
from trainop_core.operator.effects import Applier, StatusConflict
from trainop_core.operator.expectations import Expectations
from trainop_core.operator.kube import KubeClient
from trainop_core.operator.manager import job_resource
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.recorder import EventRecorder
from trainop_core.planner.types import Plan

KIND = build_registry(entry_points=False).get("PyTorchJob")


@pytest.fixture
def applier(cluster: Cluster) -> Applier:
    client = KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    return Applier(
        KIND,
        job_resource(KIND),
        client,
        EventRecorder(client),
        Expectations(),
        OperatorMetrics(),
    )


def stored_job(cluster: Cluster, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": {"pytorchReplicaSpecs": {}},
    }
    return cluster.create_job(body)


def pod(job: dict[str, Any], name: str) -> dict[str, Any]:
    meta = job["metadata"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"]}
    owner |= {"uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]},
    }


def pods_named(cluster: Cluster, name: str) -> list[str]:
    return [p.metadata.name for p in cluster.core.list_namespaced_pod(cluster.namespace).items
            if p.metadata.name == name]  # fmt: skip


def pod_creations(cluster: Cluster) -> int:
    """Pod creations the applier sent (the garbage collector may remove orphans later)."""
    return cluster.proxy.stats.requests[("create", "pods")]


def test_children_of_a_live_job_are_created(cluster: Cluster, applier: Applier) -> None:
    job = stored_job(cluster, "alive")
    out = applier.apply(job, Plan(create_pods=[pod(job, "alive-master-0")]), None)
    assert out.errors == []
    assert pods_named(cluster, "alive-master-0") == ["alive-master-0"]


def test_a_stale_cached_job_that_was_deleted_gets_no_new_children(
    cluster: Cluster, applier: Applier
) -> None:
    """The job watch lags the pod watch: a plan from the cached job must not recreate pods."""
    cached = stored_job(cluster, "gone")
    cluster.delete_job("PyTorchJob", "gone")
    before = pod_creations(cluster)
    out = applier.apply(cached, Plan(create_pods=[pod(cached, "gone-master-0")]), None)
    assert out.errors == []
    assert pod_creations(cluster) == before


def test_a_job_recreated_under_the_same_name_is_not_mistaken_for_the_cached_one(
    cluster: Cluster, applier: Applier
) -> None:
    cached = stored_job(cluster, "again")
    cluster.delete_job("PyTorchJob", "again")
    stored_job(cluster, "again")  # a new uid
    before = pod_creations(cluster)
    applier.apply(cached, Plan(create_pods=[pod(cached, "again-master-0")]), None)
    assert pod_creations(cluster) == before


def started() -> JobStatus:
    return JobStatus(start_time=datetime(2026, 1, 1, tzinfo=timezone.utc))


def job_reads(cluster: Cluster) -> int:
    """Job GETs the applier sent (through the proxy, which only the applier uses)."""
    return int(cluster.proxy.stats.requests[("get", "pytorchjobs")])


def test_a_plan_that_writes_the_status_creates_children_without_reading_the_job(
    cluster: Cluster, applier: Applier
) -> None:
    """The guarded status write is the proof the job is alive: a first reconcile costs no read."""
    job = stored_job(cluster, "first")
    before = job_reads(cluster)
    plan = Plan(create_pods=[pod(job, "first-master-0")], status=started())
    out = applier.apply(job, plan, None)
    assert out.errors == []
    assert job_reads(cluster) == before
    assert pods_named(cluster, "first-master-0") == ["first-master-0"]
    assert cluster.get_job("PyTorchJob", "first")["status"]["startTime"]


def has_run(job: dict[str, Any]) -> dict[str, Any]:
    """The cached job as it is once the operator has written a condition (no longer its first
    plan: its children are created only after the status write proved it alive)."""
    created = {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}
    return {**job, "status": {"conditions": [created]}}


def test_a_deleted_job_whose_status_write_fails_gets_no_children(
    cluster: Cluster, applier: Applier
) -> None:
    cached = has_run(stored_job(cluster, "gone"))
    cluster.delete_job("PyTorchJob", "gone")
    before = pod_creations(cluster)
    plan = Plan(create_pods=[pod(cached, "gone-master-0")], status=started())
    out = applier.apply(cached, plan, None)
    assert out.errors == []
    assert pod_creations(cluster) == before


def test_a_recreated_job_makes_the_guarded_status_write_lose_and_creates_nothing(
    cluster: Cluster, applier: Applier
) -> None:
    cached = has_run(stored_job(cluster, "again"))
    cluster.delete_job("PyTorchJob", "again")
    stored_job(cluster, "again")  # a new uid
    before = pod_creations(cluster)
    plan = Plan(create_pods=[pod(cached, "again-master-0")], status=started())
    with pytest.raises(StatusConflict):
        applier.apply(cached, plan, None)
    assert pod_creations(cluster) == before


def test_children_are_written_several_at_a_time_and_a_failure_spares_the_others(
    cluster: Cluster,
) -> None:
    client = KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    with ThreadPoolExecutor(4) as pool:
        applier = Applier(
            KIND, job_resource(KIND), client, EventRecorder(client), Expectations(),
            OperatorMetrics(), pool=pool,
        )  # fmt: skip
        job = stored_job(cluster, "many")
        pods = [pod(job, f"many-worker-{i}") for i in range(6)]
        pods[3]["metadata"]["name"] = "Not_A_Valid_Name"
        out = applier.apply(job, Plan(create_pods=pods, status=started()), None)
    assert len(out.errors) == 1 and "Not_A_Valid_Name" in out.errors[0]
    created = {p.metadata.name for p in cluster.core.list_namespaced_pod(cluster.namespace).items}
    assert created >= {f"many-worker-{i}" for i in (0, 1, 2, 4, 5)}
    assert (
        applier.expectations.satisfied(f"PyTorchJob/{cluster.namespace}/many/pods") is False
    )  # 5 to see


def pod_deletions(cluster: Cluster) -> int:
    return int(cluster.proxy.stats.requests[("delete", "pods")])


def live_pods_named(cluster: Cluster, name: str) -> list[str]:
    """Pods of that name not being deleted (a bound pod's deletion waits for its kubelet)."""
    pods = cluster.core.list_namespaced_pod(cluster.namespace).items
    return [p.metadata.name for p in pods
            if p.metadata.name == name and p.metadata.deletion_timestamp is None]  # fmt: skip


def test_a_first_plan_creates_the_children_then_writes_the_status(
    cluster: Cluster, applier: Applier
) -> None:
    job = stored_job(cluster, "first-plan")
    reads, deletions = job_reads(cluster), pod_deletions(cluster)
    mark = len(cluster.proxy.stats.answered)
    plan = Plan(create_pods=[pod(job, f"first-plan-worker-{i}") for i in range(2)])
    plan.status = started()
    assert applier.apply(job, plan, None).errors == []
    assert pods_named(cluster, "first-plan-worker-1") == ["first-plan-worker-1"]
    assert cluster.get_job("PyTorchJob", "first-plan")["status"]["startTime"]
    assert (job_reads(cluster), pod_deletions(cluster)) == (reads, deletions)
    answers = [(i.verb, i.resource) for _, i, _ in cluster.proxy.stats.answered[mark:]]
    assert answers.index(("update", "pytorchjobs/status")) > answers.index(("create", "pods"))


def suspended(job: dict[str, Any]) -> dict[str, Any]:
    """The cached job as Kueue leaves it before admission: created, then suspended."""
    conditions = [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
        {"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended"},
    ]
    return {**job, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("cached", "children_first"),
    [
        pytest.param(suspended, True, id="a resumed job gets its pods before its status"),
        pytest.param(has_run, False, id="a job that has run gets its status before its pods"),
    ],
)
def test_the_order_of_pods_and_status_write(
    cluster: Cluster, applier: Applier, cached: Any, children_first: bool
) -> None:
    """Kueue's admission unsuspends a job: its pods start one round trip sooner when they are
    created before the status write (suspension deleted every pod: none can be running)."""
    name = f"order-{int(children_first)}"
    job = cached(stored_job(cluster, name))
    mark = len(cluster.proxy.stats.answered)
    plan = Plan(create_pods=[pod(job, f"{name}-worker-0")], status=started())
    assert applier.apply(job, plan, None).errors == []
    answers = [(i.verb, i.resource) for _, i, _ in cluster.proxy.stats.answered[mark:]]
    pods_first = answers.index(("create", "pods")) < answers.index(("update", "pytorchjobs/status"))
    assert pods_first is children_first


def test_children_made_by_a_first_plan_for_a_deleted_job_are_deleted_at_once(
    cluster: Cluster, applier: Applier
) -> None:
    cached = stored_job(cluster, "gone-first")
    cluster.delete_job("PyTorchJob", "gone-first")
    plan = Plan(create_pods=[pod(cached, "gone-first-master-0")], status=started())
    created, deleted = pod_creations(cluster), pod_deletions(cluster)
    assert applier.apply(cached, plan, None).errors == []
    assert pod_creations(cluster) - created == pod_deletions(cluster) - deleted == 1
    assert live_pods_named(cluster, "gone-first-master-0") == []


def test_children_made_by_a_first_plan_for_a_recreated_job_are_deleted_and_the_plan_redone(
    cluster: Cluster, applier: Applier
) -> None:
    cached = stored_job(cluster, "again-first")
    cluster.delete_job("PyTorchJob", "again-first")
    stored_job(cluster, "again-first")  # a new uid: the guarded status write loses
    plan = Plan(create_pods=[pod(cached, "again-first-master-0")], status=started())
    deleted = pod_deletions(cluster)
    with pytest.raises(StatusConflict):
        applier.apply(cached, plan, None)
    assert pod_deletions(cluster) - deleted == 1
    assert live_pods_named(cluster, "again-first-master-0") == []


def service(job: dict[str, Any], name: str) -> dict[str, Any]:
    body = pod(job, name)
    body["kind"] = "Service"
    body["spec"] = {"clusterIP": "None", "selector": {"job": job["metadata"]["name"]}}
    return body


class StatusFirstClient(KubeClient):
    """Holds every Service creation until a status write has been answered (bounded): a
    reconcile that waited for its Services before writing the status would wait out the bound."""

    BOUND = 60.0  # seconds: only reached when the order is wrong

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.status_answered = threading.Event()
        self.services_saw_status: list[bool] = []

    def create(self, res: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if res.kind == "Service":
            self.services_saw_status.append(self.status_answered.wait(self.BOUND))
        return super().create(res, namespace, body)

    def replace_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = super().replace_status(*args, **kwargs)
        self.status_answered.set()
        return answer


@pytest.fixture
def status_first(cluster: Cluster) -> Iterator[tuple[Applier, StatusFirstClient]]:
    client = StatusFirstClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    with ThreadPoolExecutor(4) as pool:
        yield Applier(
            KIND, job_resource(KIND), client, EventRecorder(client), Expectations(),
            OperatorMetrics(), pool=pool,
        ), client  # fmt: skip


def test_a_resumed_job_sends_its_services_and_status_write_together_after_its_pods(
    cluster: Cluster, status_first: tuple[Applier, StatusFirstClient]
) -> None:
    """Kueue admits two jobs together and one worker reconciles them in turn: the first one's
    Services and status write go out at once, so the second waits two round trips, not three."""
    applier, client = status_first
    job = suspended(stored_job(cluster, "together"))
    mark = len(cluster.proxy.stats.answered)
    plan = Plan(
        create_pods=[pod(job, f"together-worker-{i}") for i in range(2)],
        create_services=[service(job, f"together-worker-{i}") for i in range(2)],
        status=started(),
    )
    assert applier.apply(job, plan, None).errors == []
    assert client.services_saw_status == [True, True]
    answers = [(i.verb, i.resource) for _, i, _ in cluster.proxy.stats.answered[mark:]]
    last_pod = max(i for i, a in enumerate(answers) if a == ("create", "pods"))
    assert last_pod < answers.index(("update", "pytorchjobs/status"))
    assert answers.count(("create", "services")) == 2
    services = {
        s.metadata.name for s in cluster.core.list_namespaced_service(cluster.namespace).items
    }
    assert services >= {"together-worker-0", "together-worker-1"}
    key = f"PyTorchJob/{cluster.namespace}/together/services"
    assert applier.expectations.satisfied(key) is False  # 2 to see: raised before they went out


def test_services_sent_with_the_status_write_of_a_deleted_job_are_deleted_with_its_pods(
    cluster: Cluster, status_first: tuple[Applier, StatusFirstClient]
) -> None:
    applier, _ = status_first
    cached = suspended(stored_job(cluster, "gone-together"))
    cluster.delete_job("PyTorchJob", "gone-together")
    plan = Plan(
        create_pods=[pod(cached, "gone-together-worker-0")],
        create_services=[service(cached, "gone-together-worker-0")],
        status=started(),
    )
    stats = cluster.proxy.stats.requests
    before = stats[("delete", "services")], stats[("delete", "pods")]
    assert applier.apply(cached, plan, None).errors == []
    assert (stats[("delete", "services")], stats[("delete", "pods")]) == (
        before[0] + 1,
        before[1] + 1,
    )
    names = [s.metadata.name for s in cluster.core.list_namespaced_service(cluster.namespace).items]
    assert "gone-together-worker-0" not in names
