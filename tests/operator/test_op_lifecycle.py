"""Job lifecycle the operator applies beyond the contract, on the real kube-apiserver: TTL,
invalid jobs, admission warnings, gang scheduling (the session's control plane serves both PodGroup
CRDs; the second, compactable, control plane serves none)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import make_job, minimal_job
from k8s import PODGROUP_APIS, namespace_name
from opkit import Cluster, RunningOperator, open_cluster, wait_for

from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane

Start = Callable[..., RunningOperator]


def pod_group(cluster: Cluster, scheduler: str, name: str) -> dict[str, Any] | None:
    group, version = PODGROUP_APIS[scheduler]
    try:
        found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
            group, version, cluster.namespace, "podgroups", name
        )
    except Exception:  # 404: not (or no longer) there
        return None
    return found


def test_ttl_after_finished_deletes_the_job_and_counts_it(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator().wait_started()
    cluster.rule("*", run_seconds=0.2)
    cluster.create_job(
        minimal_job("PyTorchJob", "ttl").run_policy(ttlSecondsAfterFinished=1).build()
    )
    cluster.wait_condition("PyTorchJob", "ttl", "Succeeded")
    wait_for(
        lambda: (
            not cluster.custom.list_namespaced_custom_object(
                "kubeflow.org", "v1", cluster.namespace, "pytorchjobs"
            )["items"]
        ),
        what="job deleted by TTL",
    )
    wait_for(lambda: not cluster.pods("ttl"), what="pods collected")
    deleted = op.manager.metrics.jobs_deleted
    wait_for(
        lambda: deleted.value(job_namespace=cluster.namespace, framework="pytorch") == 1,
        what="deleted counter",
    )


def test_a_job_deleted_after_its_ttl_is_deleted_once_while_its_watch_lags(
    cluster: Cluster, run_operator: Start
) -> None:
    """The garbage collector's pod deletions reach the operator before the job's own delete
    event (here: the job watch is held), and make it look at the job it deleted, still cached.
    It must not send the DELETE again (the 10,000-job benchmark sent 1,667 of 10,000 twice,
    answered 404)."""
    op = run_operator().wait_started()
    controller = op.manager.controllers["PyTorchJob"]
    cluster.rule("*", run_seconds=0.2)
    job = cluster.create_job(
        minimal_job("PyTorchJob", "once").run_policy(ttlSecondsAfterFinished=2).build()
    )
    owner = f"{cluster.namespace}/{job['metadata']['uid']}"
    pods = op.manager.informers["pods"]
    wait_for(lambda: len(pods.by_index("owner", owner)) == 2, what="both pods cached")
    cluster.wait_condition("PyTorchJob", "once", "Succeeded")
    # before the TTL's 2 s are up: the job's delete event will not come on this watch
    assert cluster.proxy.stall(watch="pytorchjobs") == 1
    deletes = cluster.proxy.stats.requests[("delete", "pytorchjobs")]
    wait_for(
        lambda: cluster.proxy.stats.requests[("delete", "pytorchjobs")] > deletes,
        what="the job deleted by TTL",
    )
    wait_for(lambda: not cluster.pods("once"), what="pods collected")
    wait_for(lambda: not pods.by_index("owner", owner), what="the pod deletions seen")
    assert controller.jobs.get(f"{cluster.namespace}/once") is not None  # still cached
    wait_for(
        lambda: controller.queue.pending() == 0 and not controller.queue._processing,
        what="the reconciles the pod deletions asked for",
    )
    assert cluster.proxy.stats.requests[("delete", "pytorchjobs")] == deletes + 1


def test_a_job_the_webhook_would_reject_is_failed_once_and_not_retried(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator().wait_started()
    cluster.create_job(make_job("PyTorchJob", "bad").master().replica("Chief", 1).build())
    cluster.wait_condition("PyTorchJob", "bad", "Failed")
    job = cluster.get_job("PyTorchJob", "bad")
    (failed,) = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "PyTorchJobFailedValidation" and "Chief" in failed["message"]
    wait_for(
        lambda: "PyTorchJobFailedValidation" in {e.reason for e in cluster.events("bad")},
        what="warning event",
    )
    assert cluster.pods("bad") == []
    key = f"{cluster.namespace}/bad"
    assert op.manager.controllers["PyTorchJob"].queue.num_requeues(key) == 0


def test_upstreams_admission_warnings_are_recorded_as_warning_events_once(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator().wait_started()
    job = make_job("PyTorchJob", "el").workers(2).spec(elasticPolicy={"nProcPerNode": 2})
    cluster.create_job(job.build())
    cluster.wait_condition("PyTorchJob", "el", "Created")

    def warnings() -> list[Any]:
        return [e for e in cluster.events("el") if e.reason == "AdmissionWarning"]

    (event,) = wait_for(warnings, what="admission warning event")
    assert event.type == "Warning"
    assert event.message == (
        "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
    )
    total = op.manager.metrics.reconcile_total

    def reconciles() -> float:
        results = ("success", "requeue_after", "requeue", "error")
        return sum(total.value(controller="pytorchjob-controller", result=r) for r in results)

    wait_for(lambda: reconciles() >= 2, what="a reconcile after the status was written")
    assert len(warnings()) == 1  # later reconciles do not repeat it


@pytest.mark.parametrize(
    "scheduler", ["scheduler-plugins", "volcano"], ids=["with scheduler-plugins", "with volcano"]
)
def test_gang_scheduling_creates_a_pod_group_and_removes_it_when_done(
    cluster: Cluster, run_operator: Start, scheduler: str
) -> None:
    run_operator(gang_scheduler_name=scheduler).wait_started()
    cluster.rule("*", run_seconds=0.3)
    cluster.create_job(minimal_job("PyTorchJob", "gang").build())
    group = wait_for(lambda: pod_group(cluster, scheduler, "gang"), what="PodGroup")
    assert group["spec"]["minMember"] == 2
    assert group["metadata"]["ownerReferences"][0]["name"] == "gang"
    if scheduler == "volcano":  # Volcano: no pods until the PodGroup is admitted
        assert cluster.pods("gang") == []
        group["status"] = {"phase": "Inqueue"}
        group_api = PODGROUP_APIS[scheduler]
        cluster.custom.replace_namespaced_custom_object_status(
            *group_api, cluster.namespace, "podgroups", "gang", group
        )
    pods = wait_for(lambda: len(p := cluster.pods("gang")) == 2 and p, what="pods")
    assert {p.spec.scheduler_name for p in pods} == {scheduler}
    cluster.wait_condition("PyTorchJob", "gang", "Succeeded")
    wait_for(lambda: pod_group(cluster, scheduler, "gang") is None, what="PodGroup deleted")


def test_gang_scheduling_without_the_pod_group_crd_exits_1(
    compactable_plane: ControlPlane, registry: KindRegistry, tmp_path: Path
) -> None:
    namespace = namespace_name("no-podgroups")
    with open_cluster(compactable_plane, namespace, registry, tmp_path) as cluster:
        op = RunningOperator(cluster, gang_scheduler_name="volcano")
        op.thread.join(30)
        assert op.exit_code == 1
        assert cluster.proxy.stats.requests[("list", "podgroups")] == 1
        assert not cluster.proxy.stats.count("watch")  # it never started an informer


def test_status_written_through_the_structural_schema_is_not_rewritten_on_every_reconcile(
    cluster: Cluster, run_operator: Start
) -> None:
    """The server prunes what a CRD's schema does not declare: were any status field pruned,
    the operator would see a difference on every reconcile and write the status again."""
    from test_op_contract import SHAPES, job_of

    from trainop_core.kinds.table import build_registry

    plurals = {k.kind: k.plural for k in build_registry(entry_points=False)}
    cluster.rule("*", run_seconds=None)
    op = run_operator().wait_started()
    for kind in SHAPES:
        cluster.create_job(job_of(kind, f"s-{kind.lower()}").build())
    for kind in SHAPES:
        cluster.wait_condition(kind, f"s-{kind.lower()}", "Running")
    wait_for(lambda: all(p.status.phase == "Running" for p in cluster.core.list_namespaced_pod(
        cluster.namespace).items), what="every pod running")  # fmt: skip

    def counted_active(kind: str) -> bool:  # the status write that saw every pod running landed
        name = f"s-{kind.lower()}"
        replicas = (cluster.get_job(kind, name).get("status") or {}).get("replicaStatuses") or {}
        return sum(r.get("active", 0) for r in replicas.values()) == len(cluster.pods(name))

    wait_for(lambda: all(counted_active(kind) for kind in SHAPES), what="statuses count pods")

    def status_writes() -> int:
        return sum(
            cluster.proxy.stats.requests[("update", f"{p}/status")] for p in plurals.values()
        )

    def reconciles() -> float:
        total = op.manager.metrics.reconcile_total
        return sum(total.value(controller=f"{kind.lower()}-controller", result=r)
                   for kind in SHAPES for r in ("success", "requeue_after"))  # fmt: skip

    before, reconciled = status_writes(), reconciles()
    for kind in SHAPES:  # each poke is a reconcile that finds nothing to do
        cluster.patch_job(kind, f"s-{kind.lower()}", {"metadata": {"labels": {"poke": "1"}}})
    wait_for(lambda: reconciles() >= reconciled + len(SHAPES), what="the pokes reconciled")
    assert status_writes() == before
