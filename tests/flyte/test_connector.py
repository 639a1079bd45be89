"""The connector against the real kube-apiserver (the session's control plane, a namespace per
test), with the trainop operator and the kubelet stand-in: what `pyflyte serve connector` does for
propeller."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import flyte_tasks
import pytest
from builders import make_trainjob
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.configuration import ImageConfig, SerializationSettings
from flytekit.extend.backend.utils import render_task_template
from flytekit.models.core import identifier as ids
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate
from flytekit.tools.translator import get_serializable

pytest.importorskip("kubernetes")

from k8s import K8s
from trainop_flyte.connector import TrainingJobConnector, TrainingJobMetadata

from trainop_core.client import TrainingClient
from trainop_core.errors import NotFoundError
from trainop_core.testing.kubelet import Rule

OUTPUT_PREFIX = "s3://bucket/metadata/proj/dev/abc123/n0/data/0"


@pytest.fixture
def server(k8s: K8s) -> Iterator[K8s]:
    """The test's namespace (its Flyte project-domain), with the operator running on it."""
    with k8s.operator():
        yield k8s


@pytest.fixture
def connector(server: K8s) -> TrainingJobConnector:
    kubeconfig = str(server.kubeconfig)
    return TrainingJobConnector(
        lambda: TrainingClient(backend="kubernetes", kubeconfig=kubeconfig),
        log_link="https://logs.example/{namespace}/{name}/{replica}",
    )


def propeller_template(task: Any) -> TaskTemplate:
    """The template as propeller sends it: through protobuf, placeholders rendered."""
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    template = get_serializable(OrderedDict(), settings, task).template
    sent = TaskTemplate.from_flyte_idl(template.to_flyte_idl())
    return render_task_template(sent, OUTPUT_PREFIX)


def execution_metadata(namespace: str, retry: int = 0) -> TaskExecutionMetadata:
    task_id = ids.Identifier(ids.ResourceType.TASK, "proj", "dev", "flyte_tasks.x", "v1")
    workflow_run = ids.WorkflowExecutionIdentifier("proj", "dev", "abc123")
    node = ids.NodeExecutionIdentifier("n0", workflow_run)
    return TaskExecutionMetadata(
        task_execution_id=ids.TaskExecutionIdentifier(task_id, node, retry),
        namespace=namespace,
        labels={"execution-id": "abc123"},
        annotations={"flyte/owner": "tests"},
        k8s_service_account="flyte-runner",
        environment_variables={"FLYTE_INTERNAL_EXECUTION_ID": "abc123"},
        identity=None,
    )


def poll(connector: TrainingJobConnector, meta: TrainingJobMetadata, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        resource = connector.get(meta)
        if resource.phase in (TaskExecution.SUCCEEDED, TaskExecution.FAILED):
            return resource
        assert time.monotonic() < deadline, f"still {resource.phase}: {resource.message}"
        time.sleep(0.2)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_create_submits_every_replica_running_the_tasks_container(
    server: K8s, connector: TrainingJobConnector
) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(server.namespace))

    job = connector.client.get(meta.name, server.namespace).to_dict()
    assert job["metadata"]["labels"]["execution-id"] == "abc123"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {rtype: spec["replicas"] for rtype, spec in specs.items()} == {"Master": 1, "Worker": 2}
    for rtype, spec in specs.items():
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == "ghcr.io/x/y:1"
        assert container["command"] == ["pyflyte-execute"]
        assert f"{OUTPUT_PREFIX}/inputs.pb" in container["args"]
        env = env_of(container)
        assert env["TRAINOP_REPLICA_TYPE"] == rtype
        assert "fieldRef" in env["TRAINOP_REPLICA_INDEX"]
        assert env["FLYTE_FAIL_ON_ERROR"] == "true"
        assert env["FLYTE_INTERNAL_EXECUTION_ID"] == "abc123"
        assert pod["serviceAccountName"] == "flyte-runner"


def test_create_is_idempotent_per_attempt_and_a_retry_is_a_new_job(
    server: K8s, connector: TrainingJobConnector
) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    ns = server.namespace
    first = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(ns, retry=0))
    again = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(ns, retry=0))
    retry = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(ns, retry=1))

    assert again == first
    assert retry.name != first.name
    assert TrainingJobMetadata.decode(first.encode()) == first
    assert sorted(j.name for j in connector.client.list(ns)) == sorted([first.name, retry.name])


def test_get_follows_the_job_to_success_with_log_links(
    server: K8s, connector: TrainingJobConnector
) -> None:
    server.kubelet.rules[:] = [Rule(run_seconds=0.3)]
    template = propeller_template(flyte_tasks.rank_sum)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(server.namespace))
    resource = poll(connector, meta)

    assert resource.phase == TaskExecution.SUCCEEDED
    assert resource.outputs is None  # the primary replica's pyflyte-execute wrote outputs.pb
    links = {link.name: link.uri for link in resource.log_links}
    assert links[f"{meta.name} worker-1"] == (
        f"https://logs.example/{server.namespace}/{meta.name}/worker-1"
    )
    assert len(links) == 3


def test_a_failed_replica_fails_the_task_with_the_reason_and_its_log(
    server: K8s, connector: TrainingJobConnector
) -> None:
    server.kubelet.rules[:] = [
        Rule("*-worker-1", run_seconds=0.2, exit_code=1, log=CRASH_LOG),
        Rule("*", run_seconds=None, log="training...\n"),
    ]
    template = propeller_template(flyte_tasks.worker_fails)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(server.namespace))
    resource = poll(connector, meta)

    assert resource.phase == TaskExecution.FAILED
    assert "Worker" in resource.message and "failed" in resource.message
    assert "last lines of worker-1" in resource.message
    assert "ValueError: worker two exploded" in resource.message


CRASH_LOG = "Traceback (most recent call last):\n  File x\nValueError: worker two exploded\n"


def test_delete_is_idempotent(server: K8s, connector: TrainingJobConnector) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(server.namespace))

    connector.delete(meta)
    connector.delete(meta)
    with pytest.raises(NotFoundError):
        connector.client.get(meta.name, server.namespace)


def test_a_task_with_a_pod_template_and_a_timeout_translates_both() -> None:
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    template = get_serializable(OrderedDict(), settings, flyte_tasks.with_pod_template).template
    assert template.container is None  # flytekit moves the container into the pod spec

    manifest = TrainingJobConnector().manifest(template, OUTPUT_PREFIX, None, None)

    (worker,) = manifest["spec"]["xgbReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["command"] == ["pyflyte-execute"]
    assert worker["args"][-1] == "with_pod_template"
    assert worker["image"] == "ghcr.io/x/y:1"
    assert manifest["metadata"]["namespace"] == "default"
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 300  # the task's timeout


@pytest.fixture
def trainjob_server(k8s: K8s) -> Iterator[K8s]:
    """The namespace with Trainer's CRDs and runtimes, the operator running TrainJobs."""
    k8s.install_trainer()
    with k8s.operator(enable_schemes=("TrainJob",)):
        yield k8s


def stored_trainjob(server: K8s, name: str) -> dict[str, Any]:
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{server.namespace}/trainjobs/{name}"
    found: dict[str, Any] = server.rest.get(path)
    return found


def test_a_trainjob_task_is_created_as_a_trainjob_on_the_cluster_and_followed_to_success(
    trainjob_server: K8s,
) -> None:
    """On a backend that stores TrainJobs, the task's TrainJob itself is created (checked
    against the cluster's runtimes): the task's program under torchrun, Flyte's env, labels and
    service account where a TrainJob's author would put them."""
    server = trainjob_server
    server.kubelet.rules[:] = [Rule(run_seconds=0.3)]
    kubeconfig = str(server.kubeconfig)
    connector = TrainingJobConnector(
        lambda: TrainingClient(backend="kubernetes", kubeconfig=kubeconfig),
        log_link="https://logs.example/{namespace}/{name}/{replica}",
    )
    template = propeller_template(flyte_tasks.trainjob_ddp)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(server.namespace))

    assert meta.kind == "TrainJob"
    job = stored_trainjob(server, meta.name)
    assert job["metadata"]["labels"]["execution-id"] == "abc123"
    spec = job["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"  # with the CRD's defaults
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["image"]) == (2, "ghcr.io/x/y:1")
    assert trainer["command"] == ["torchrun"]
    assert trainer["args"][:2] == ["--no-python", "pyflyte-execute"]
    assert f"{OUTPUT_PREFIX}/inputs.pb" in trainer["args"]
    env = env_of(trainer)
    assert env["STEPS"] == "3" and env["FLYTE_INTERNAL_EXECUTION_ID"] == "abc123"
    assert env["TRAINOP_REPLICA_TYPE"] == "Node" and "fieldRef" in env["TRAINOP_REPLICA_INDEX"]
    (patch,) = spec["runtimePatches"]
    (step,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert patch["manager"] == "trainop.dev/flyte"
    assert step["template"]["spec"]["template"]["spec"] == {"serviceAccountName": "flyte-runner"}
    resource = poll(connector, meta)
    assert resource.phase == TaskExecution.SUCCEEDED
    links = sorted(link.name for link in resource.log_links)
    assert links == [f"{meta.name} node-0", f"{meta.name} node-1"]
    pods = server.rest.get(f"/api/v1/namespaces/{server.namespace}/pods")["items"]
    assert {p["spec"]["serviceAccountName"] for p in pods} == {"flyte-runner"}
    assert {p["metadata"]["labels"]["execution-id"] for p in pods} == {"abc123"}


def test_a_trainjob_command_task_is_created_as_written_with_its_inputs_filled_in(
    trainjob_server: K8s,
) -> None:
    from flytekit.core.type_engine import TypeEngine
    from flytekit.models.literals import LiteralMap
    from trainop_flyte import TrainingJobCommandTask

    server = trainjob_server
    task = TrainingJobCommandTask(
        name="tj_command",
        job=make_trainjob(
            runtime="xgboost-distributed",
            trainer={"numNodes": 2, "args": ["--rounds", "{{.inputs.rounds}}"]},
        ),
        inputs={"rounds": int},
    )
    kubeconfig = str(server.kubeconfig)
    connector = TrainingJobConnector(
        lambda: TrainingClient(backend="kubernetes", kubeconfig=kubeconfig)
    )
    literal = TypeEngine.to_literal(None, 7, int, TypeEngine.to_literal_type(int))  # type: ignore[arg-type]
    inputs = LiteralMap({"rounds": literal})
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    template = get_serializable(OrderedDict(), settings, task).template  # no container to render
    meta = connector.create(template, OUTPUT_PREFIX, inputs, execution_metadata(server.namespace))
    trainer = stored_trainjob(server, meta.name)["spec"]["trainer"]
    assert trainer == {
        "numNodes": 2,
        "args": ["--rounds", "7"],
        "env": [{"name": "FLYTE_INTERNAL_EXECUTION_ID", "value": "abc123"}],
    }


def test_get_shows_the_training_progress_while_it_runs_and_keeps_it_at_the_end(
    k8s: K8s,
) -> None:
    k8s.kubelet.rules[:] = [
        Rule("*-master-0", run_seconds=None, log="loss=0.5 progressPercentage=45\n"),
        Rule("*", run_seconds=None),
    ]
    connector = TrainingJobConnector(
        lambda: TrainingClient(backend="kubernetes", kubeconfig=str(k8s.kubeconfig))
    )
    with k8s.operator(progress_interval=0.5):
        template = propeller_template(flyte_tasks.rank_sum)
        meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(k8s.namespace))
        deadline = time.monotonic() + 60
        while "45%" not in (running := connector.get(meta)).message:
            assert time.monotonic() < deadline, running.message
            time.sleep(0.2)
        assert running.phase == TaskExecution.RUNNING
        assert running.message.endswith("| 45% | loss=0.5")
        assert running.custom_info["trainerStatus"]["progressPercentage"] == 45
        for pod in (f"{meta.name}-master-0", f"{meta.name}-worker-0", f"{meta.name}-worker-1"):
            k8s.kubelet.terminate(k8s.namespace, pod, 0)
        done = poll(connector, meta)
    assert done.phase == TaskExecution.SUCCEEDED
    assert done.custom_info["trainerStatus"]["metrics"] == [{"name": "loss", "value": "0.5"}]
