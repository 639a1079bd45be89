"""The unmodified Kubeflow SDKs against the operator on process nodes: the function a data
scientist hands `kubeflow`'s TrainerClient really runs, on both nodes, and `get_job_logs` returns
what it printed; the v1 SDK (`kubeflow-training`) creates a PyTorchJob and reads its logs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from k8s import K8s, fast_operator_options
from nodekit import NodeCluster


def train() -> None:  # what a data scientist hands the SDK; the SDK ships its source
    import os

    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = [dist.get_rank() + 1]
    import torch

    tensor = torch.tensor(total)
    dist.all_reduce(tensor)
    print(f"node {os.environ.get('PET_NODE_RANK')} rank {dist.get_rank()} "
          f"of {dist.get_world_size()} sum {int(tensor.item())}", flush=True)  # fmt: skip
    dist.destroy_process_group()


def test_the_kubeflow_sdk_runs_a_custom_trainer_on_two_nodes_and_reads_its_logs(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, registry: Any
) -> None:
    pytest.importorskip("kubeflow.trainer")
    from clusters import running_operator
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import CustomTrainer, TrainerClient

    K8s(node_cluster.cp, ns, registry, None).install_trainer()  # type: ignore[arg-type]  # no stand-in
    options = fast_operator_options(ns, enable_schemes=("TrainJob",))
    with running_operator(node_cluster.cp, registry, options):
        sdk = TrainerClient(
            backend_config=KubernetesBackendConfig(namespace=ns, config_file=str(kubeconfig))
        )
        runtime = sdk.get_runtime("torch-distributed")
        name = sdk.train(runtime=runtime, trainer=CustomTrainer(func=train, num_nodes=2))
        job = sdk.wait_for_job_status(name, timeout=240, polling_interval=1)
        logs = "\n".join(sdk.get_job_logs(name))
        assert job.status == "Complete", logs
        assert "node 0 rank 0 of 2 sum 3" in logs
        steps = {s.name: s.pod_name for s in job.steps}
        other = "\n".join(node_cluster.log(ns, steps["node-1"]).splitlines())
        assert "node 1 rank 1 of 2 sum 3" in other
        sdk.delete_job(name)


def train_v1() -> None:  # the v1 SDK ships this function's source, as the v2 one does
    import os
    import sys

    # one write per line: torchrun's processes share the container's stdout, and print's
    # separate write of the newline lets two processes' lines run together
    sys.stdout.write(
        f"v1 sdk trained on {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}\n"
    )
    sys.stdout.flush()


@pytest.mark.slow
def test_the_v1_sdk_creates_a_pytorchjob_that_runs_and_reads_its_logs(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, registry: Any
) -> None:
    pytest.importorskip("kubeflow.training")
    from clusters import running_operator
    from kubeflow.training import TrainingClient

    with running_operator(node_cluster.cp, registry, fast_operator_options(ns)):
        sdk = TrainingClient(config_file=str(kubeconfig), namespace=ns)
        sdk.create_job(name="v1sdk", train_func=train_v1, num_workers=2)
        sdk.wait_for_job_conditions("v1sdk", wait_timeout=240, polling_interval=1)
        logs, _ = sdk.get_job_logs("v1sdk")
    text = "\n".join(logs.values())
    # torchrun in each of the 2 replicas starts a process per CPU ("auto"): rank 0 of 2 x that
    assert re.search(r"v1 sdk trained on 0 of \d+\n", text), logs
