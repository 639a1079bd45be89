"""Job lifecycle the operator applies beyond the contract: TTL, invalid jobs, gang scheduling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from builders import make_job, minimal_job
from opkit import Cluster, RunningOperator, wait_for

Start = Callable[..., RunningOperator]
PODGROUP_APIS = {
    "volcano": ("scheduling.volcano.sh", "v1beta1"),
    "scheduler-plugins": ("scheduling.x-k8s.io", "v1alpha1"),
}


def install_pod_group_crd(cluster: Cluster, group: str, version: str) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "podgroups",
                "singular": "podgroup",
                "kind": "PodGroup",
                "listKind": "PodGroupList",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    store = cluster.server.store
    store.create(store.resource("customresourcedefinitions", "apiextensions.k8s.io"), "", crd)


def pod_group(cluster: Cluster, scheduler: str, name: str) -> dict[str, Any] | None:
    group, version = PODGROUP_APIS[scheduler]
    try:
        found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
            group, version, "default", "podgroups", name
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
                "kubeflow.org", "v1", "default", "pytorchjobs"
            )["items"]
        ),
        what="job deleted by TTL",
    )
    wait_for(lambda: not cluster.pods("ttl"), what="pods collected")
    deleted = op.manager.metrics.jobs_deleted
    wait_for(
        lambda: deleted.value(job_namespace="default", framework="pytorch") == 1,
        what="deleted counter",
    )


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
    assert op.manager.controllers["PyTorchJob"].queue.num_requeues("default/bad") == 0


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
    install_pod_group_crd(cluster, *PODGROUP_APIS[scheduler])
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
            *group_api, "default", "podgroups", "gang", group
        )
    pods = wait_for(lambda: len(p := cluster.pods("gang")) == 2 and p, what="pods")
    assert {p.spec.scheduler_name for p in pods} == {scheduler}
    cluster.wait_condition("PyTorchJob", "gang", "Succeeded")
    wait_for(lambda: pod_group(cluster, scheduler, "gang") is None, what="PodGroup deleted")


def test_gang_scheduling_without_the_pod_group_crd_exits_1(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator(gang_scheduler_name="volcano")
    op.thread.join(10)
    assert op.exit_code == 1
