"""A TrainJob on the mpi-distributed runtime through the operator and the real kube-apiserver: the
launcher and node pods, the hostfile ConfigMap, the launcher's env, and the job's state following
the launcher.

As for MPIJob (tests/operator/test_op_mpi.py), the kubelet stand-in runs no container, so no
kubectl exec reaches a node here; that mpirun really starts the ranks through the rsh agent is
shown on the local and Ray backends (examples/mpi/logreg-trainjob.yaml in tests/test_examples.py
and tests/ray/test_ray_examples.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from opkit import Cluster, wait_for
from test_op_trainjob import (
    Start,
    condition,
    create_trainjob,
    trainer_cluster,  # noqa: F401 (reason: a fixture, used by its name below)
    trainjob,
)

COMMAND = ["mpirun", "--hostfile", "/etc/mpi/hostfile", "python", "train.py"]


def train() -> None:  # what a data scientist hands the SDK; the SDK ships its source
    print("training")


def read(cluster: Cluster, resource: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.rest.get(
        f"/api/v1/namespaces/{cluster.namespace}/{resource}/{name}"
    )
    return found


def test_an_mpi_trainjob_runs_its_command_in_the_launcher_and_completes_with_it(
    trainer_cluster: Cluster,  # noqa: F811 (reason: the imported fixture, by its name)
    run_operator: Start,
) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=None)  # every pod runs until told otherwise
    trainer = {"numNodes": 2, "numProcPerNode": 2, "command": COMMAND}
    create_trainjob(cluster, "tj", "mpi-distributed", trainer=trainer)
    names = ["tj-launcher", "tj-node-0", "tj-node-1"]
    pods = wait_for(lambda: len(p := cluster.pods("tj")) == 3 and p, 60, "launcher and nodes")
    assert [p.metadata.name for p in pods] == names
    launcher, nodes = pods[0], pods[1:]

    config = read(cluster, "configmaps", "tj-mpi-hostfile")
    assert config["data"]["hostfile"] == "tj-node-0 slots=2\ntj-node-1 slots=2\n"
    assert "kubectl exec ${POD_NAME} --container node" in config["data"]["kubexec.sh"]
    assert config["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"

    (main,) = launcher.spec.containers
    assert (main.name, main.command) == ("node", COMMAND)
    env = {e.name: e.value for e in main.env}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    mounts = {m.name: m.mount_path for m in main.volume_mounts}
    assert mounts["mpi-job-config"] == "/etc/mpi"
    assert launcher.spec.service_account_name == "tj-launcher"
    labels = launcher.metadata.labels
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "launcher"
    assert labels["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    for index, node in enumerate(nodes):
        (container,) = node.spec.containers
        assert (container.command, container.args) == (["sleep"], ["365d"])
        node_labels = node.metadata.labels
        assert node_labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert node_labels["batch.kubernetes.io/job-completion-index"] == str(index)

    cluster.terminate("tj-launcher", exit_code=0)  # mpirun ended well
    complete = wait_for(lambda: condition(cluster, "tj", "Complete"), 60, "TrainJob Complete")
    assert (complete["reason"], complete["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    steps = {s["name"]: s for s in trainjob(cluster, "tj")["status"]["jobsStatus"]}
    assert sorted(steps) == ["launcher", "node"] and steps["launcher"]["succeeded"] == 1

    # The nodes only hosted ranks: they are stopped once the launcher has ended.
    def running_nodes() -> list[str]:
        pods = cluster.pods("tj")
        return [
            p.metadata.name
            for p in pods
            if "node" in p.metadata.name and not p.metadata.deletion_timestamp
        ]

    wait_for(lambda: running_nodes() == [], 60, "the nodes stopped")


def test_a_failed_launcher_fails_the_mpi_trainjob(
    trainer_cluster: Cluster,  # noqa: F811 (reason: the imported fixture, by its name)
    run_operator: Start,
) -> None:
    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=None)
    cluster.rule("tj-launcher", run_seconds=0.2, exit_code=1)  # inserted first: it wins
    create_trainjob(cluster, "tj", "mpi-distributed", trainer={"numNodes": 2, "command": COMMAND})
    failed = wait_for(lambda: condition(cluster, "tj", "Failed"), 60, "TrainJob Failed")
    assert "launcher" in failed["message"].lower()


def test_the_kubeflow_sdk_trains_on_mpi_distributed_and_reads_the_launcher_s_logs(
    trainer_cluster: Cluster,  # noqa: F811 (reason: the imported fixture, by its name)
    run_operator: Start,
) -> None:
    """The unmodified SDK (kubeflow 0.5): its MPI CustomTrainer command (`mpirun --hostfile
    /etc/mpi/hostfile ...`) goes to the launcher; it names the launcher's step node-0 and the
    nodes node-1.. (its MPI convention), and reads the launcher's container `node` for logs."""
    pytest.importorskip("kubeflow.trainer")
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import CustomTrainer, TrainerClient

    cluster = trainer_cluster
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=None)  # the nodes host ranks until the launcher ends
    cluster.rule("*-launcher", run_seconds=2.0, log="rank=0 loss=0.25\n")
    config = KubernetesBackendConfig(
        namespace=cluster.namespace, config_file=str(cluster.kubeconfig)
    )
    sdk = TrainerClient(backend_config=config)
    runtime = sdk.get_runtime("mpi-distributed")
    name = sdk.train(runtime=runtime, trainer=CustomTrainer(func=train, num_nodes=2))
    expected = {
        "node-0": f"{name}-launcher",
        "node-1": f"{name}-node-0",
        "node-2": f"{name}-node-1",
    }
    wait_for(
        lambda: {step.name: step.pod_name for step in sdk.get_job(name).steps} == expected,
        60,
        "the SDK sees the launcher as node-0 and the nodes as node-1..",
    )
    job = sdk.wait_for_job_status(name, timeout=90, polling_interval=1)
    assert job.status == "Complete"
    launcher = cluster.core.read_namespaced_pod(f"{name}-launcher", cluster.namespace)
    (main,) = launcher.spec.containers
    assert main.command[:3] == ["mpirun", "--hostfile", "/etc/mpi/hostfile"]
    assert "rank=0 loss=0.25" in "\n".join(sdk.get_job_logs(name))
