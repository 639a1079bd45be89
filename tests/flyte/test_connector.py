"""The connector against a real (in-process) Kubernetes API server, with the trainop operator
and the kubelet stand-in: what `pyflyte serve connector` does for propeller."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flyte_tasks
import pytest
from clusters import install_crds, running_operator
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.configuration import ImageConfig, SerializationSettings
from flytekit.extend.backend.utils import render_task_template
from flytekit.models.core import identifier as ids
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate
from flytekit.tools.translator import get_serializable

pytest.importorskip("kubernetes")
testing = pytest.importorskip("trainop_core.testing", reason="trainop_core.testing is not there")

from trainop_flyte.connector import TrainingJobConnector, TrainingJobMetadata  # noqa: E402

from trainop_core.client import TrainingClient  # noqa: E402 -- after the skips
from trainop_core.errors import NotFoundError  # noqa: E402
from trainop_core.kinds.table import build_registry  # noqa: E402

NAMESPACE = "proj-dev"
OUTPUT_PREFIX = "s3://bucket/metadata/proj/dev/abc123/n0/data/0"


@pytest.fixture
def server() -> Iterator[Any]:
    registry = build_registry(entry_points=False)
    with testing.ApiServer() as api:
        install_crds(api, registry)
        api.store.create(api.store.resource("namespaces"), "", {"metadata": {"name": NAMESPACE}})
        with running_operator(api, registry):
            yield api


@pytest.fixture
def connector(server: Any, tmp_path: Path) -> TrainingJobConnector:
    kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
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


def execution_metadata(retry: int = 0) -> TaskExecutionMetadata:
    task_id = ids.Identifier(ids.ResourceType.TASK, "proj", "dev", "flyte_tasks.x", "v1")
    workflow_run = ids.WorkflowExecutionIdentifier("proj", "dev", "abc123")
    node = ids.NodeExecutionIdentifier("n0", workflow_run)
    return TaskExecutionMetadata(
        task_execution_id=ids.TaskExecutionIdentifier(task_id, node, retry),
        namespace=NAMESPACE,
        labels={"execution-id": "abc123"},
        annotations={"flyte/owner": "tests"},
        k8s_service_account="flyte-runner",
        environment_variables={"FLYTE_INTERNAL_EXECUTION_ID": "abc123"},
        identity=None,
    )


def poll(connector: TrainingJobConnector, meta: TrainingJobMetadata, timeout: float = 30) -> Any:
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
    server: Any, connector: TrainingJobConnector
) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata())

    job = connector.client.get(meta.name, NAMESPACE).to_dict()
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
    server: Any, connector: TrainingJobConnector
) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    first = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(retry=0))
    again = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(retry=0))
    retry = connector.create(template, OUTPUT_PREFIX, None, execution_metadata(retry=1))

    assert again == first
    assert retry.name != first.name
    assert TrainingJobMetadata.decode(first.encode()) == first
    assert sorted(j.name for j in connector.client.list(NAMESPACE)) == sorted(
        [first.name, retry.name]
    )


def test_get_follows_the_job_to_success_with_log_links(
    server: Any, connector: TrainingJobConnector
) -> None:
    with testing.Kubelet(server, [testing.Rule(run_seconds=0.3)]):
        template = propeller_template(flyte_tasks.rank_sum)
        meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata())
        resource = poll(connector, meta)

    assert resource.phase == TaskExecution.SUCCEEDED
    assert resource.outputs is None  # the primary replica's pyflyte-execute wrote outputs.pb
    links = {link.name: link.uri for link in resource.log_links}
    assert links[f"{meta.name} worker-1"] == (
        f"https://logs.example/{NAMESPACE}/{meta.name}/worker-1"
    )
    assert len(links) == 3


def test_a_failed_replica_fails_the_task_with_the_reason_and_its_log(
    server: Any, connector: TrainingJobConnector
) -> None:
    rules = [
        testing.Rule("*-worker-1", run_seconds=0.2, exit_code=1, log=CRASH_LOG),
        testing.Rule("*", run_seconds=None, log="training...\n"),
    ]
    with testing.Kubelet(server, rules):
        template = propeller_template(flyte_tasks.worker_fails)
        meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata())
        resource = poll(connector, meta)

    assert resource.phase == TaskExecution.FAILED
    assert "Worker" in resource.message and "failed" in resource.message
    assert "last lines of worker-1" in resource.message
    assert "ValueError: worker two exploded" in resource.message


CRASH_LOG = "Traceback (most recent call last):\n  File x\nValueError: worker two exploded\n"


def test_delete_is_idempotent(server: Any, connector: TrainingJobConnector) -> None:
    template = propeller_template(flyte_tasks.rank_sum)
    meta = connector.create(template, OUTPUT_PREFIX, None, execution_metadata())

    connector.delete(meta)
    connector.delete(meta)
    with pytest.raises(NotFoundError):
        connector.client.get(meta.name, NAMESPACE)


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
