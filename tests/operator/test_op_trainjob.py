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


@pytest.mark.parametrize("runtime", ["torch-distributed", "mpi-distributed"])
def test_a_trainjob_above_the_replica_bound_fails_naming_num_nodes_without_a_pod(
    trainer_cluster: Cluster, run_operator: Start, runtime: str
) -> None:
    """numNodes 2**31 - 1 (the CRD's int32 takes it): failed before anything is planned."""
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    create_trainjob(cluster, "tj", runtime, trainer={"numNodes": 2**31 - 1})
    failed = wait_for(lambda: condition(cluster, "tj", "Failed"), 60, "TrainJob Failed")
    assert failed["message"].startswith("spec.trainer.numNodes: the job has 214748364")
    assert (
        "(--max-replicas-per-job)" in failed["message"] and "replicaSpecs" not in failed["message"]
    )
    assert cluster.pods("tj") == [] and cluster.services("tj") == []


def test_a_trainjob_setting_env_its_policy_reserves_fails_naming_the_entry(
    trainer_cluster: Cluster, run_operator: Start
) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    env = [{"name": "JAX_NUM_PROCESSES", "value": "8"}]
    create_trainjob(cluster, "tj", "jax-distributed", trainer={"env": env})
    failed = wait_for(lambda: condition(cluster, "tj", "Failed"), 60, "TrainJob Failed")
    assert "spec.trainer.env[0].name: must not have reserved envs" in failed["message"]
    assert cluster.pods("tj") == []


# --- the CRDs: defaults and constraints as Trainer v2.3's (tests/core/test_trainer_crd_facts.py)


def test_a_trainjob_naming_only_its_runtime_comes_back_with_trainers_defaults(
    trainer_cluster: Cluster,
) -> None:
    # As Trainer's docs write it: the API server fills in what Kueue's webhook and Trainer read.
    create_trainjob(trainer_cluster, "bare", "torch-distributed")
    spec = trainjob(trainer_cluster, "bare")["spec"]
    assert spec["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert spec["suspend"] is False
    assert spec["managedBy"] == "trainer.kubeflow.org/trainjob-controller"


def test_a_runtime_comes_back_with_trainers_and_jobsets_defaults(trainer_cluster: Cluster) -> None:
    stored = trainer_cluster.custom.get_cluster_custom_object(
        *TRAINER, "clustertrainingruntimes", "mpi-distributed"
    )
    assert stored["spec"]["mlPolicy"]["mpi"] == {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/root/.ssh",
        "runLauncherAsNode": False,
    }
    for job in stored["spec"]["template"]["spec"]["replicatedJobs"]:
        assert (job["replicas"], job["groupName"]) == (1, "default"), job["name"]


REFUSED = [
    ({"trainer": {"image": "x" * 501}}, "spec.trainer.image", "more than 500"),
    ({"managedBy": "someone/else"}, "spec.managedBy", "ManagedBy must be"),
    ({"runtimePatches": [{"manager": ""}]}, "spec.runtimePatches[0].manager", "at least 1"),
    ({"activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds", "greater than or equal to 1"),
]


@pytest.mark.parametrize(
    ("spec", "field", "says"), REFUSED, ids=[f"{field} is refused" for _, field, _ in REFUSED]
)
def test_the_api_server_refuses_what_trainers_crd_refuses(
    trainer_cluster: Cluster, spec: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(ApiException) as refused:
        create_trainjob(trainer_cluster, "bad", "torch-distributed", **spec)
    assert refused.value.status == 422
    assert field in refused.value.body and says in refused.value.body, refused.value.body


def test_a_trainjobs_trainer_and_runtime_ref_cannot_change_but_suspend_can(
    trainer_cluster: Cluster,
) -> None:
    create_trainjob(trainer_cluster, "tj", "torch-distributed", trainer={"numNodes": 1})
    patch = trainer_cluster.custom.patch_namespaced_custom_object
    for change in ({"trainer": {"numNodes": 2}}, {"runtimeRef": {"name": "jax-distributed"}}):
        with pytest.raises(ApiException) as refused:
            patch(*TRAINER, trainer_cluster.namespace, "trainjobs", "tj", {"spec": change})
        assert "field is immutable" in refused.value.body, change
    patch(*TRAINER, trainer_cluster.namespace, "trainjobs", "tj", {"spec": {"suspend": True}})
    assert trainjob(trainer_cluster, "tj")["spec"]["suspend"] is True
