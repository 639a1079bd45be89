"""Reconciles on the real kube-apiserver: a job is prepared (read, defaulted, validated) once per
generation however often it is reconciled, and no event that can change its plan is dropped."""

from __future__ import annotations

from collections.abc import Callable

from builders import minimal_job
from opkit import Cluster, RunningOperator, wait_for

Start = Callable[..., RunningOperator]


def reconciles(op: RunningOperator, kind: str = "PyTorchJob") -> float:
    total = op.manager.metrics.reconcile_total
    controller = f"{kind.lower()}-controller"
    return sum(
        total.value(controller=controller, result=r)
        for r in ("success", "requeue_after", "requeue", "error")
    )


def active(cluster: Cluster, name: str) -> int:
    status = cluster.get_job("PyTorchJob", name).get("status") or {}
    return int(sum(r.get("active", 0) for r in (status.get("replicaStatuses") or {}).values()))


def zero_the_counts(cluster: Cluster, name: str) -> None:
    """Write the job's status as another client would (no new generation): counts of 0."""
    job = cluster.get_job("PyTorchJob", name)
    job["status"]["replicaStatuses"] = {"Master": {"active": 0}, "Worker": {"active": 0}}
    cluster.custom.replace_namespaced_custom_object_status(
        "kubeflow.org", "v1", cluster.namespace, "pytorchjobs", name, job
    )


def test_a_job_is_prepared_once_per_generation_and_a_changed_spec_is_prepared_and_used(
    cluster: Cluster, run_operator: Start
) -> None:
    cluster.rule("*", run_seconds=None)  # pods run until the deadline stops them
    op = run_operator().wait_started()
    prepared = op.manager.controllers["PyTorchJob"].prepared
    cluster.create_job(minimal_job("PyTorchJob", "gen").workers(3).build())
    cluster.wait_condition("PyTorchJob", "gen", "Running")
    wait_for(lambda: active(cluster, "gen") == 4, what="every pod counted active")
    for _ in range(2):  # status-only changes: reconciled, not prepared again
        before = reconciles(op)
        zero_the_counts(cluster, "gen")
        wait_for(lambda: active(cluster, "gen") == 4, what="the counts set right again")
        # set right by a reconcile (counted as it ends, after its write) of the job prepared before
        wait_for(lambda: reconciles(op) > before, what="the reconcile counted")  # noqa: B023
    assert prepared.prepared == 1

    cluster.patch_job("PyTorchJob", "gen", {"spec": {"runPolicy": {"activeDeadlineSeconds": 1}}})
    assert cluster.get_job("PyTorchJob", "gen")["metadata"]["generation"] == 2
    conditions = cluster.wait_condition("PyTorchJob", "gen", "Failed")  # the new spec was used
    assert conditions.get("Running") != "True"
    wait_for(lambda: not any(p.status.phase == "Running" for p in cluster.pods("gen")),
             what="pods stopped")  # fmt: skip
    assert prepared.prepared == 2


def test_a_status_written_by_someone_else_is_reconciled_and_set_right(
    cluster: Cluster, run_operator: Start
) -> None:
    """Only the echo of the operator's own write is passed over: another writer's is not."""
    cluster.rule("*", run_seconds=None)
    op = run_operator().wait_started()
    cluster.create_job(minimal_job("PyTorchJob", "other").build())
    cluster.wait_condition("PyTorchJob", "other", "Running")
    wait_for(lambda: active(cluster, "other") == 2, what="both pods counted active")
    before = reconciles(op)
    zero_the_counts(cluster, "other")
    wait_for(lambda: active(cluster, "other") == 2, what="the operator set the counts right again")
    assert reconciles(op) > before
