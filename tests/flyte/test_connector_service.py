"""The connector served for real: `pyflyte serve connector` in a subprocess on free ports, driven
through flyteidl's gRPC client stubs the way flytepropeller's connector plugin calls it
(CreateTask with the rendered template, GetTask until a terminal phase, DeleteTask), once with
the local backend (replicas really run `pyflyte-execute`) and once against Kubernetes.

The Kubernetes variant needs only the `kube` fixture: a kubeconfig for a cluster running the
trainop operator, and a way to make its pods run (`kube.pods(rules)`); the test body does not
know which API server it talks to.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flyte_tasks
import grpc
import pytest
from flyteidl.admin import agent_pb2
from flyteidl.core import literals_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flyteidl.service.agent_pb2_grpc import AgentMetadataServiceStub, AsyncAgentServiceStub
from flytekit.configuration import ImageConfig, SerializationSettings
from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.type_engine import TypeEngine
from flytekit.extend.backend.utils import render_task_template
from flytekit.models.core import identifier as ids
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate
from flytekit.tools.translator import get_serializable
from k8s import K8s
from trainop_flyte.connector import TASK_TYPE, TASK_TYPE_VERSION

from trainop_core.client import TrainingClient
from trainop_core.errors import NotFoundError

pytest.importorskip("grpc_health", reason="needs flytekit[connector]")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CATEGORY = agent_pb2.TaskCategory(name=TASK_TYPE, version=TASK_TYPE_VERSION)
TERMINAL = (TaskExecution.SUCCEEDED, TaskExecution.FAILED, TaskExecution.ABORTED)


# --- the service ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A running `pyflyte serve connector` and the stubs propeller would use."""

    process: subprocess.Popen[bytes]
    channel: grpc.Channel
    log: Path

    @property
    def tasks(self) -> AsyncAgentServiceStub:
        return AsyncAgentServiceStub(self.channel)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def connector_service(env: dict[str, str], workdir: Path) -> Iterator[Service]:
    """Serve the connector (found through trainop's `flytekit.plugins` entry point and named in
    --modules) with `env`; stopped, with everything it started, when the block ends."""
    port = free_port()
    paths = [str(REPO), *(str(REPO / "integrations" / p) for p in ("flyte", "kfp", "hpo"))]
    paths += [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    pyflyte = Path(sys.executable).with_name("pyflyte")  # this interpreter's console script
    command = [str(pyflyte), "serve", "connector", "--port", str(port)]
    command += ["--prometheus_port", str(free_port())]
    command += ["--modules", "trainop_flyte.plugin"]
    log = workdir / "connector.log"
    full_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=workdir, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    service = Service(process, channel, log)
    try:
        grpc.channel_ready_future(channel).result(timeout=120)
        yield service
    except grpc.FutureTimeoutError:
        pytest.fail(f"pyflyte serve connector did not start:\n{service.output()[-3000:]}")
    finally:
        channel.close()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- what propeller sends ------------------------------------------------------------------------
def rendered_template(task: Any, output_prefix: str) -> TaskTemplate:
    """The template as propeller sends it: serialised, through protobuf, placeholders rendered."""
    settings = SerializationSettings(image_config=ImageConfig.from_images("ghcr.io/x/y:1"))
    template = get_serializable(OrderedDict(), settings, task).template
    sent = TaskTemplate.from_flyte_idl(template.to_flyte_idl())
    return render_task_template(sent, output_prefix)


def execution_metadata(namespace: str, retry: int = 0) -> TaskExecutionMetadata:
    task_id = ids.Identifier(ids.ResourceType.TASK, "proj", "dev", "flyte_tasks.x", "v1")
    workflow_run = ids.WorkflowExecutionIdentifier("proj", "dev", f"run{time.time_ns()}")
    node = ids.NodeExecutionIdentifier("n0", workflow_run)
    return TaskExecutionMetadata(
        task_execution_id=ids.TaskExecutionIdentifier(task_id, node, retry),
        namespace=namespace,
        labels={"execution-id": workflow_run.name},
        annotations={"flyte/owner": "tests"},
        k8s_service_account="flyte-runner",
        environment_variables={"FLYTE_INTERNAL_EXECUTION_ID": workflow_run.name},
        identity=None,
    )


def create(
    service: Service, task: Any, prefix: str, namespace: str, inputs: LiteralMap | None = None
) -> bytes:
    request = agent_pb2.CreateTaskRequest(
        template=rendered_template(task, prefix).to_flyte_idl(),
        output_prefix=prefix,
        task_execution_metadata=execution_metadata(namespace).to_flyte_idl(),
    )
    if inputs is not None:
        request.inputs.CopyFrom(inputs.to_flyte_idl())
    response = service.tasks.CreateTask(request, timeout=60)
    return bytes(response.resource_meta)


def get(service: Service, meta: bytes) -> agent_pb2.Resource:
    request = agent_pb2.GetTaskRequest(task_category=CATEGORY, resource_meta=meta)
    return service.tasks.GetTask(request, timeout=60).resource


def poll(service: Service, meta: bytes, timeout: float = 120) -> agent_pb2.Resource:
    """GetTask until a terminal phase, as propeller's plugin polls."""
    deadline = time.monotonic() + timeout
    while True:
        resource = get(service, meta)
        if resource.phase in TERMINAL:
            return resource
        assert time.monotonic() < deadline, f"still {resource.phase}:\n{service.output()[-2000:]}"
        time.sleep(0.5)


def delete(service: Service, meta: bytes) -> None:
    request = agent_pb2.DeleteTaskRequest(task_category=CATEGORY, resource_meta=meta)
    service.tasks.DeleteTask(request, timeout=60)


def literals(**values: Any) -> LiteralMap:
    ctx = FlyteContextManager.current_context()
    hints = {name: type(value) for name, value in values.items()}
    return TypeEngine.dict_to_literal_map(ctx, values, type_hints=hints)


def write_inputs(prefix: Path, inputs: LiteralMap) -> None:
    """What propeller does before CreateTask: the task's inputs at <prefix>/inputs.pb."""
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "inputs.pb").write_bytes(inputs.to_flyte_idl().SerializeToString())


def read_outputs(prefix: Path) -> dict[str, Any]:
    proto = literals_pb2.LiteralMap()
    proto.ParseFromString((prefix / "outputs.pb").read_bytes())
    ctx = FlyteContextManager.current_context()
    found = LiteralMap.from_flyte_idl(proto)
    return {
        name: TypeEngine.to_python_value(ctx, literal, dict[str, str])
        for name, literal in found.literals.items()
    }


def job_of(meta: bytes) -> tuple[str, str]:
    from trainop_flyte.connector import TrainingJobMetadata

    decoded = TrainingJobMetadata.decode(meta)
    return decoded.name, decoded.namespace


# --- the local backend ---------------------------------------------------------------------------
@pytest.fixture
def local_service(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    home = tmp_path / "trainop-home"
    env = {"TRAINOP_FLYTE_BACKEND": "local", "TRAINOP_HOME": str(home)}
    env |= {"FLYTE_SDK_RICH_TRACEBACKS": "0", "FLYTE_SDK_LOGGING_FORMAT": "text"}
    with connector_service(env, tmp_path) as service:
        yield service, home


def test_the_served_connector_runs_a_task_on_the_local_backend(
    local_service: tuple[Service, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, home = local_service
    connectors = AgentMetadataServiceStub(service.channel).ListAgents(
        agent_pb2.ListAgentsRequest(), timeout=30
    )
    categories = {
        (c.name, c.version) for a in connectors.agents for c in a.supported_task_categories
    }
    assert (TASK_TYPE, TASK_TYPE_VERSION) in categories

    prefix = tmp_path / "run"
    inputs = literals(tag="served")
    write_inputs(prefix, inputs)
    meta = create(service, flyte_tasks.pytorch_env, str(prefix), "default", inputs)
    resource = poll(service, meta)

    assert resource.phase == TaskExecution.SUCCEEDED, resource.message
    report = read_outputs(prefix)["o0"]  # the master's pyflyte-execute wrote outputs.pb
    assert (report["tag"], report["RANK"], report["TRAINOP_REPLICA_TYPE"]) == (
        "served",
        "0",
        "Master",
    )
    name, namespace = job_of(meta)
    monkeypatch.setenv("TRAINOP_HOME", str(home))
    assert TrainingClient("local").get(name, namespace).name == name

    delete(service, meta)
    delete(service, meta)  # propeller may call it again: idempotent
    with pytest.raises(NotFoundError):
        TrainingClient("local").get(name, namespace)


def test_a_failing_replica_fails_the_served_task_with_its_reason(
    local_service: tuple[Service, Path], tmp_path: Path
) -> None:
    service, _ = local_service
    prefix = tmp_path / "run"
    write_inputs(prefix, literals())
    meta = create(service, flyte_tasks.worker_fails_by_default, str(prefix), "default")
    resource = poll(service, meta)
    delete(service, meta)  # the master is still sleeping: stop it

    assert resource.phase == TaskExecution.FAILED
    assert "1 Worker replica(s) failed" in resource.message
    assert "worker two exploded" in resource.message  # the failing replica's own reason


# --- Kubernetes ----------------------------------------------------------------------------------
@dataclass
class Kube:
    """A cluster with the trainop operator: its kubeconfig, the namespace the tasks run in, and
    `pods(rules)` making its pods run (and write logs) as the rules say while the block lasts."""

    kubeconfig: Path
    namespace: str
    pods: Callable[[list[Any]], contextlib.AbstractContextManager[Any]]


@pytest.fixture
def kube(k8s: K8s) -> Iterator[Kube]:
    """The real kube-apiserver (the session's control plane), the test's namespace, the operator
    on it, and the kubelet stand-in's rules."""

    @contextlib.contextmanager
    def pods(rules: list[Any]) -> Iterator[None]:
        k8s.kubelet.rules[:] = rules
        try:
            yield
        finally:
            k8s.kubelet.rules[:] = []

    with k8s.operator():
        yield Kube(k8s.kubeconfig, k8s.namespace, pods)


@pytest.fixture
def kube_service(kube: Kube, tmp_path: Path) -> Iterator[Service]:
    env = {
        "TRAINOP_FLYTE_BACKEND": "kubernetes",
        "KUBECONFIG": str(kube.kubeconfig),
        "TRAINOP_FLYTE_LOG_LINK": "https://logs.example/{namespace}/{name}/{replica}",
    }
    with connector_service(env, tmp_path) as service:
        yield service


def cluster_client(kube: Kube) -> TrainingClient:
    return TrainingClient("kubernetes", kubeconfig=str(kube.kubeconfig))


def test_the_served_connector_creates_follows_and_deletes_a_kubernetes_job(
    kube: Kube, kube_service: Service
) -> None:
    from trainop_core.testing import Rule

    prefix = "s3://bucket/metadata/proj/dev/run/n0/data/0"
    with kube.pods([Rule(run_seconds=0.3)]):
        meta = create(
            kube_service, flyte_tasks.rank_sum, prefix, kube.namespace, literals(offset=1)
        )
        name, namespace = job_of(meta)
        job = cluster_client(kube).get(name, namespace).to_dict()
        resource = poll(kube_service, meta)

    assert namespace == kube.namespace
    assert job["metadata"]["labels"]["execution-id"].startswith("run")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["command"] == ["pyflyte-execute"]
        assert f"{prefix}/inputs.pb" in container["args"]
        assert spec["restartPolicy"] == "Never"
    assert resource.phase == TaskExecution.SUCCEEDED, resource.message
    links = {link.name: link.uri for link in resource.log_links}
    assert links[f"{name} master-0"] == f"https://logs.example/{kube.namespace}/{name}/master-0"

    delete(kube_service, meta)
    delete(kube_service, meta)
    with pytest.raises(NotFoundError):
        cluster_client(kube).get(name, namespace)


def test_a_failed_pod_fails_the_served_kubernetes_task_with_its_log(
    kube: Kube, kube_service: Service
) -> None:
    from trainop_core.testing import Rule

    crash = "Traceback (most recent call last):\nValueError: worker two exploded\n"
    rules = [
        Rule("*-worker-1", run_seconds=0.2, exit_code=1, log=crash),
        Rule("*", run_seconds=None, log="training...\n"),
    ]
    with kube.pods(rules):
        meta = create(kube_service, flyte_tasks.worker_fails_by_default, "s3://b/x", kube.namespace)
        resource = poll(kube_service, meta)
        delete(kube_service, meta)

    assert resource.phase == TaskExecution.FAILED
    assert "1 Worker replica(s) failed" in resource.message
    assert "last lines of worker-1" in resource.message
    assert "worker two exploded" in resource.message
