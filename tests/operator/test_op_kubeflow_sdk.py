"""The unmodified Kubeflow SDK (PyPI `kubeflow`, its Kubernetes backend) against trainop's operator
on the real kube-apiserver: it lists the runtimes, trains a CustomTrainer on 2 nodes, waits for
Complete, reads the logs of node 0 and deletes the job. The kubelet stand-in plays the nodes'
containers (it does not run the function); real training of a TrainJob is tested locally
(tests/test_examples.py) and on Ray.

Skipped where `kubeflow` (0.5.x) is not installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opkit import Cluster, RunningOperator, wait_for

pytest.importorskip("kubeflow.trainer")

from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient
from test_op_trainjob import TRAINER, trainer_cluster  # noqa: F401  # reason: a fixture, used by name

Start = Callable[..., RunningOperator]


def train() -> None:  # what a data scientist hands the SDK; the SDK ships its source
    print("training")


@pytest.mark.usefixtures("trainer_cluster")  # the CRDs and the default runtimes installed
def test_the_kubeflow_sdk_lists_trains_waits_reads_logs_and_deletes(
    cluster: Cluster, run_operator: Start
) -> None:
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=0.5, log="epoch=1 loss=0.25\n")
    sdk = TrainerClient(
        backend_config=KubernetesBackendConfig(
            namespace=cluster.namespace, config_file=str(cluster.kubeconfig)
        )
    )

    runtimes = {r.name: r for r in sdk.list_runtimes()}
    assert {"torch-distributed", "xgboost-distributed", "jax-distributed"} <= set(runtimes)
    # The SDK reads the mpi runtime as Trainer's: its CustomTrainer command is mpirun with the
    # hostfile at /etc/mpi/hostfile, where the mpi policy mounts it in the launcher.
    assert runtimes["mpi-distributed"].trainer.command[:3] == (
        "mpirun",
        "--hostfile",
        "/etc/mpi/hostfile",
    )
    torch = runtimes["torch-distributed"]
    assert torch.trainer.framework == "torch"

    name = sdk.train(runtime=torch, trainer=CustomTrainer(func=train, num_nodes=2))
    job = sdk.wait_for_job_status(name, timeout=90, polling_interval=1)
    assert job.status == "Complete" and job.num_nodes == 2
    assert sorted(step.name for step in job.steps) == ["node-0", "node-1"]
    assert {step.pod_name for step in job.steps} == {f"{name}-node-0", f"{name}-node-1"}

    pod = cluster.core.read_namespaced_pod(f"{name}-node-1", cluster.namespace)
    (node,) = pod.spec.containers
    env: dict[str, Any] = {e.name: e.value for e in node.env or []}
    assert node.command[0] == "bash" and "torchrun" in " ".join(node.command + (node.args or []))
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == (
        "2",
        "1",
        f"{name}-node-0",
    )

    assert "epoch=1 loss=0.25" in "\n".join(sdk.get_job_logs(name))

    sdk.delete_job(name)
    wait_for(
        lambda: (
            name
            not in {
                j["metadata"]["name"]
                for j in cluster.custom.list_namespaced_custom_object(
                    *TRAINER, cluster.namespace, "trainjobs"
                )["items"]
            }
        ),
        what="TrainJob deleted",
    )


@pytest.mark.usefixtures("trainer_cluster")
def test_a_custom_trainer_asking_for_gpus_starts_a_process_per_gpu_as_under_trainer(
    cluster: Cluster, run_operator: Start
) -> None:
    # The SDK's CustomTrainer never sets numProcPerNode: Trainer's "auto" decides it.
    run_operator(enable_schemes=("TrainJob",)).wait_started()
    cluster.rule("*", run_seconds=0.2)
    sdk = TrainerClient(
        backend_config=KubernetesBackendConfig(
            namespace=cluster.namespace, config_file=str(cluster.kubeconfig)
        )
    )
    torch = sdk.get_runtime("torch-distributed")
    trainer = CustomTrainer(func=train, num_nodes=1, resources_per_node={"gpu": 2, "cpu": 8})
    name = sdk.train(runtime=torch, trainer=trainer)
    assert sdk.wait_for_job_status(name, timeout=90, polling_interval=1).status == "Complete"
    pod = cluster.core.read_namespaced_pod(f"{name}-node-0", cluster.namespace)
    (node,) = pod.spec.containers
    assert node.resources.limits["nvidia.com/gpu"] == "2"
    assert {e.name: e.value for e in node.env or []}["PET_NPROC_PER_NODE"] == "2"
    sdk.delete_job(name)
