"""TrainJobs on the operator (`--enable-scheme TrainJob`), on the real kube-apiserver: the CRDs of
operator/trainer, the default runtimes applied as they ship, the generic reconciler."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from opkit import Cluster, RunningOperator, wait_for

from trainop_core.runtimes.crds import trainer_crds

Start = Callable[..., RunningOperator]
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
RUNTIMES_DIR = Path(__file__).resolve().parents[2] / "operator" / "trainer" / "runtimes"


@pytest.fixture
def trainer_cluster(cluster: Cluster) -> Cluster:
    """The cluster with Trainer v2's CRDs and trainop's default runtimes installed."""
    cluster.control_plane.install_crds(trainer_crds())
    for path in sorted(RUNTIMES_DIR.glob("*.yaml")):
        runtime = yaml.safe_load(path.read_text())
        name = runtime["metadata"]["name"]
        with contextlib.suppress(ApiException):  # 404: not installed by an earlier test
            cluster.custom.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", name)
        cluster.custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    return cluster


def create_trainjob(cluster: Cluster, name: str, runtime: str, **spec: Any) -> None:
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }
    cluster.custom.create_namespaced_custom_object(*TRAINER, cluster.namespace, "trainjobs", body)


def trainjob(cluster: Cluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.custom.get_namespaced_custom_object(
        *TRAINER, cluster.namespace, "trainjobs", name
    )
    return found


def condition(cluster: Cluster, name: str, ctype: str) -> dict[str, Any] | None:
    conditions = (trainjob(cluster, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == ctype and c["status"] == "True"), None)


@pytest.mark.parametrize("runtime", ["torch-distributed", "xgboost-distributed", "jax-distributed"])
def test_a_trainjob_on_each_default_runtime_reaches_complete(
    trainer_cluster: Cluster, run_operator: Start, runtime: str
) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=0.3)
    create_trainjob(cluster, "tj", runtime, trainer={"numNodes": 2, "command": ["train"]})
    complete = wait_for(lambda: condition(cluster, "tj", "Complete"), 60, "TrainJob Complete")
    assert complete["reason"] and complete["lastTransitionTime"]
    pods = cluster.pods("tj")
    assert [p.metadata.name for p in pods] == ["tj-node-0", "tj-node-1"]
    for index, pod in enumerate(pods):
        assert pod.metadata.labels["jobset.sigs.k8s.io/jobset-name"] == "tj"
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == str(index)
        (owner,) = pod.metadata.owner_references
        assert (owner.api_version, owner.kind) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    status = trainjob(cluster, "tj")["status"]
    assert status["jobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]


def test_a_failing_node_fails_the_trainjob(trainer_cluster: Cluster, run_operator: Start) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=None)
    cluster.rule("tj-node-1", run_seconds=0.2, exit_code=3)  # inserted first: it wins
    create_trainjob(cluster, "tj", "torch-distributed", trainer={"numNodes": 2})
    failed = wait_for(lambda: condition(cluster, "tj", "Failed"), 60, "TrainJob Failed")
    assert "node" in failed["message"].lower()


def test_a_suspended_trainjob_has_no_pods_until_resumed(
    trainer_cluster: Cluster, run_operator: Start
) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=0.2)
    create_trainjob(cluster, "tj", "torch-distributed", suspend=True)
    wait_for(lambda: condition(cluster, "tj", "Suspended"), 60, "TrainJob Suspended")
    assert cluster.pods("tj") == []
    cluster.custom.patch_namespaced_custom_object(
        *TRAINER, cluster.namespace, "trainjobs", "tj", {"spec": {"suspend": False}}
    )
    wait_for(lambda: condition(cluster, "tj", "Complete"), 60, "TrainJob Complete after resume")


def test_a_trainjob_waits_for_its_runtime_with_a_warning_then_runs(
    trainer_cluster: Cluster, run_operator: Start
) -> None:
    """kubectl apply of a directory may create the TrainJob before the runtime it names. The job
    is retried with the queue's growing backoff; the runtime's arrival brings it back at once."""
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=0.2)
    with contextlib.suppress(ApiException):  # 404: no earlier test left it
        cluster.custom.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", "late")
    create_trainjob(cluster, "tj", "late")
    # 12 failed looks: the next one is 5 ms * 2**12 = 20 s away.
    warned = wait_for(
        lambda: [
            e
            for e in cluster.events("tj")
            if e.reason == "TrainingRuntimeNotFound" and (e.count or 1) >= 12
        ],
        120,
        "12 TrainingRuntimeNotFound warnings",
    )
    assert "spec.runtimeRef.name" in warned[0].message and "torch-distributed" in warned[0].message
    assert cluster.pods("tj") == [] and condition(cluster, "tj", "Failed") is None
    late = yaml.safe_load((RUNTIMES_DIR / "torch-distributed.yaml").read_text())
    late["metadata"]["name"] = "late"
    cluster.custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", late)
    wait_for(lambda: condition(cluster, "tj", "Complete"), 15, "TrainJob Complete, not backoff")


def test_an_invalid_trainjob_fails_once_naming_the_field(
    trainer_cluster: Cluster, run_operator: Start
) -> None:
    """No admission webhook refused it (trainop serves none for TrainJobs): the operator fails it
    with every problem, and runs nothing."""
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    create_trainjob(cluster, "tj", "torch-distributed", trainer={"numNodes": 0})
    failed = wait_for(lambda: condition(cluster, "tj", "Failed"), 60, "TrainJob Failed")
    assert "spec.trainer.numNodes: must be at least 1" in failed["message"]
    assert cluster.pods("tj") == []
