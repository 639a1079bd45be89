"""Flyte's and KFP's cluster paths on process nodes, through the operator: the Flyte connector
(what `pyflyte serve connector` runs for propeller) submits a command task's PyTorchJob, and the
KFP component's body submits an XGBoostJob; both really train over the two nodes, and the
accuracy the primary replica printed comes back as the task's output and the step's metric."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s import fast_operator_options
from nodekit import NodeCluster

from trainop_core.client import TrainingClient
from trainop_core.testing.builders import wait_for

ROOT = Path(__file__).resolve().parents[2]


def spread(cluster: NodeCluster, ns: str) -> set[str]:
    """The nodes the namespace's pods ran on."""
    pods = cluster.cp.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    return {p["spec"]["nodeName"] for p in pods}


@pytest.mark.slow
def test_the_flyte_connector_trains_a_command_tasks_pytorchjob_and_returns_its_accuracy(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, registry: Any
) -> None:
    pytest.importorskip("flytekit")
    from clusters import running_operator
    from flyteidl.core.execution_pb2 import TaskExecution
    from flytekit.configuration import ImageConfig, SerializationSettings
    from flytekit.core.context_manager import FlyteContextManager
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.core import identifier as ids
    from flytekit.models.task import TaskExecutionMetadata, TaskTemplate
    from flytekit.tools.translator import get_serializable
    from trainop_flyte import TrainingJobCommandTask
    from trainop_flyte.connector import TrainingJobConnector

    job = yaml.safe_load((ROOT / "examples" / "pytorch" / "ddp.yaml").read_text())
    del job["metadata"]["namespace"]  # the task's: its Flyte project-domain's
    task = TrainingJobCommandTask(
        name="ddp_on_nodes", job=job, outputs={"state": str, "accuracy": float}
    )
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    serialised = get_serializable(OrderedDict(), settings, task).template
    template = TaskTemplate.from_flyte_idl(serialised.to_flyte_idl())  # as propeller sends it
    task_id = ids.Identifier(ids.ResourceType.TASK, "proj", "dev", "ddp_on_nodes", "v1")
    node = ids.NodeExecutionIdentifier("n0", ids.WorkflowExecutionIdentifier("proj", "dev", "e1"))
    metadata = TaskExecutionMetadata(
        task_execution_id=ids.TaskExecutionIdentifier(task_id, node, 0),
        namespace=ns, labels={}, annotations={}, k8s_service_account="default",
        environment_variables={}, identity=None,
    )  # fmt: skip
    connector = TrainingJobConnector(
        lambda: TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))
    )

    finished = (TaskExecution.SUCCEEDED, TaskExecution.FAILED)
    with running_operator(node_cluster.cp, registry, fast_operator_options(ns)):
        meta = connector.create(template, "s3://bucket/out", None, metadata)

        def ended() -> Any:  # what propeller polls for
            resource = connector.get(meta)
            return resource if resource.phase in finished else None

        resource = wait_for(ended, 240, 0.5)

    assert resource.phase == TaskExecution.SUCCEEDED, resource.message
    context = FlyteContextManager.current_context()
    outputs = TypeEngine.literal_map_to_kwargs(
        context, resource.outputs, {"state": str, "accuracy": float}
    )
    assert outputs["state"] == "Succeeded"
    assert 0.8 <= outputs["accuracy"] <= 1.0  # what ddp.py's rank 0 printed after training
    assert spread(node_cluster, ns) == {"node-0", "node-1"}


@pytest.mark.slow
def test_the_kfp_component_trains_an_xgboostjob_and_logs_its_accuracy(
    node_cluster: NodeCluster,
    ns: str,
    kubeconfig: Path,
    registry: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("kfp")
    from clusters import running_operator
    from kfp import dsl
    from trainop_kfp.runner import run_component

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # as in a pipeline step's pod
    job = yaml.safe_load((ROOT / "examples" / "xgboost" / "dist.yaml").read_text())
    del job["metadata"]["namespace"]  # the step's namespace: its kubeconfig's
    metrics = dsl.Metrics(name="metrics")

    with running_operator(node_cluster.cp, registry, fast_operator_options(ns)):
        state, name = run_component(
            metrics=metrics, job_yaml=yaml.safe_dump(job), backend="kubernetes",
            timeout_seconds=240, delete_after=False,
        )  # fmt: skip

    assert (state, name) == ("Succeeded", "xgboost-dist-classification")
    assert 0.8 <= metrics.metadata["accuracy"] <= 1.0  # what dist.py's rank 0 printed
    assert spread(node_cluster, ns) == {"node-0", "node-1"}
