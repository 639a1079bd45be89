"""The Flyte connector: a task template in, a trainop job out, through the core `TrainingClient`.

`create` turns the template's `custom["job"]` (a kubeflow.org/v1 manifest) into a job: for function
tasks every replica runs the task's own container (the `pyflyte-execute` args Flyte rendered), for
command tasks the manifest already says what to run and `{{.inputs.<name>}}` is filled in. `get`
reads the job's conditions; `delete` is idempotent. The same class runs under `pyflyte serve
connector` (Kubernetes backend) and inside local executions (local backend), so both paths share it.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flyteidl.core.execution_pb2 import TaskExecution, TaskLog
from flytekit.extend.backend.base_connector import AsyncConnectorBase, Resource, ResourceMeta
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskExecutionMetadata, TaskTemplate

from trainop_core.errors import AlreadyExistsError, NotFoundError
from trainop_core.progress import trainer_status_of
from trainop_flyte import outputs as job_outputs
from trainop_flyte import replicas as job_replicas
from trainop_flyte.cluster_trainjob import TRAINJOB_KEY, cluster_trainjob, stores_trainjobs
from trainop_flyte.inputs import render_inputs
from trainop_flyte.naming import job_name

TASK_TYPE = "trainop_training_job"
TASK_TYPE_VERSION = 0
BACKEND_ENV = "TRAINOP_FLYTE_BACKEND"  # which TrainingClient backend `pyflyte serve connector` uses
LOG_LINK_ENV = "TRAINOP_FLYTE_LOG_LINK"  # e.g. https://logs.example/{namespace}/{name}/{replica}
LOG_TAIL_LINES = 20
ANY_REPLICA = "any"  # metrics_replica: the first replica that reported every declared metric
# How a replica's log shows it raised: pyflyte-execute's error banner, a Python traceback.
ERROR_MARKERS = ("Error Captured by Flyte", "Traceback (most recent call last)")

_PHASES = {
    "Succeeded": TaskExecution.SUCCEEDED,
    "Failed": TaskExecution.FAILED,
    "Running": TaskExecution.RUNNING,
    "Restarting": TaskExecution.RUNNING,
    "Suspended": TaskExecution.QUEUED,
    "Created": TaskExecution.INITIALIZING,
}


@dataclass
class TrainingJobMetadata(ResourceMeta):
    """What Flyte keeps between create, get and delete: the job's identity and declared outputs."""

    name: str
    namespace: str
    kind: str
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> outputs.Role value
    metrics_replica: str = ""  # replica whose metrics are outputs ("" = the primary)


ClientFactory = Callable[[], Any]


def kubernetes_client() -> Any:
    """The client `pyflyte serve connector` uses (backend from $TRAINOP_FLYTE_BACKEND)."""
    from trainop_core.client import TrainingClient

    return TrainingClient(backend=os.environ.get(BACKEND_ENV, "kubernetes"))


class TrainingJobConnector(AsyncConnectorBase):
    """Creates, watches and deletes trainop jobs for Flyte tasks of type `trainop_training_job`."""

    name = "trainop Training Job Connector"

    def __init__(
        self,
        client: ClientFactory = kubernetes_client,
        *,
        workdir: str | None = None,  # local runs: where replicas start (containers' workingDir)
        env: Mapping[str, str] | None = None,  # local runs: extra env for every replica
        log_link: str | None = None,
    ) -> None:
        super().__init__(
            task_type_name=TASK_TYPE,
            task_type_version=TASK_TYPE_VERSION,
            metadata_type=TrainingJobMetadata,
        )
        self._client_factory = client
        self._client: Any = None
        self._workdir = workdir
        self._env = dict(env or {})
        self._log_link = log_link if log_link is not None else os.environ.get(LOG_LINK_ENV)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    # --- create ---------------------------------------------------------------------------------
    def create(
        self,
        task_template: TaskTemplate,
        output_prefix: str,
        inputs: LiteralMap | None = None,
        task_execution_metadata: TaskExecutionMetadata | None = None,
        **kwargs: Any,
    ) -> TrainingJobMetadata:
        """Submit the job; idempotent for one task attempt (an existing job of that name is it)."""
        manifest = self.manifest(task_template, output_prefix, inputs, task_execution_metadata)
        meta = TrainingJobMetadata(
            name=manifest["metadata"]["name"],
            namespace=manifest["metadata"]["namespace"],
            kind=manifest["kind"],
            outputs=job_outputs.roles(task_template),
            metrics_replica=str(task_template.custom.get("metricsReplica", "")),
        )
        with contextlib.suppress(AlreadyExistsError):  # an earlier call for this same attempt
            self.client.create(manifest)
        return meta

    def manifest(
        self,
        template: TaskTemplate,
        output_prefix: str,
        inputs: LiteralMap | None,
        metadata: TaskExecutionMetadata | None,
    ) -> dict[str, Any]:
        """The job manifest for one task attempt (pure apart from reading `template`, and for a
        TrainJob task whether the client's backend stores TrainJobs as such)."""
        container = job_replicas.task_container(template)
        if TRAINJOB_KEY in template.custom and stores_trainjobs(self.client):
            trainjob = {**template.custom, TRAINJOB_KEY: whole_numbers(
                copy.deepcopy(dict(template.custom[TRAINJOB_KEY])))}  # fmt: skip
            if container is None:
                trainjob[TRAINJOB_KEY] = render_inputs(trainjob[TRAINJOB_KEY], inputs)
            manifest = cluster_trainjob(trainjob, container, metadata, _timeout(template))
        else:
            manifest = self._planned_manifest(template, container, inputs, metadata)
        meta = manifest.setdefault("metadata", {})
        meta["name"] = job_name(template.id.name or "task", metadata, output_prefix)
        meta["namespace"] = meta.get("namespace") or _namespace(metadata)
        return manifest

    def _planned_manifest(
        self,
        template: TaskTemplate,
        container: Any,
        inputs: LiteralMap | None,
        metadata: TaskExecutionMetadata | None,
    ) -> dict[str, Any]:
        manifest = whole_numbers(copy.deepcopy(dict(template.custom["job"])))
        if container is not None:
            job_replicas.run_container(manifest, container)
        else:
            manifest = render_inputs(manifest, inputs)
        job_replicas.add_identity(manifest)
        job_replicas.add_env(manifest, self._env)
        if self._workdir:
            job_replicas.set_working_dir(manifest, self._workdir)
        _apply_metadata(manifest, metadata)
        _apply_timeout(manifest, template)
        return manifest

    # --- get ------------------------------------------------------------------------------------
    def get(self, resource_meta: TrainingJobMetadata, **kwargs: Any) -> Resource:
        """The job's phase, message and log links; on success a command task's outputs. Its
        training progress, once the primary replica reported some, is in `custom_info`
        (`trainerStatus`, Kubeflow Trainer's fields) and, while it runs, in the message that
        Flyte shows as the task's status (`Running | 45% | ETA 2m0s | loss=0.23`)."""
        from trainop_core.client import failure_message, job_state

        try:
            job = self.client.get(resource_meta.name, resource_meta.namespace)
        except NotFoundError:
            gone = f"job {resource_meta.namespace}/{resource_meta.name} no longer exists"
            return Resource(phase=TaskExecution.FAILED, message=gone)
        state = job_state(job)
        phase = _PHASES.get(state, TaskExecution.INITIALIZING)
        message = job_replicas.condition_message(job, state)
        outputs: LiteralMap | None = None
        if phase == TaskExecution.FAILED:
            message = self._failure_message(job, failure_message(job))
        elif phase == TaskExecution.SUCCEEDED and resource_meta.outputs:
            try:
                outputs = self._outputs(job, state, resource_meta)
            except job_outputs.MissingMetricError as err:
                phase, message = TaskExecution.FAILED, f"{message}; {err}"
        links = self._log_links(job)
        progress = trainer_status_of(job)  # what the primary replica reported, if anything
        if progress is not None and phase == TaskExecution.RUNNING:
            message = f"{message} | {progress.summary()}"
        info = {"trainerStatus": progress.to_wire()} if progress is not None else None
        return Resource(
            phase=phase, message=message, log_links=links, outputs=outputs, custom_info=info
        )

    def _outputs(self, job: Any, state: str, meta: TrainingJobMetadata) -> LiteralMap:
        """The declared outputs, metrics read from the metrics replica (with "any": from the
        first replica, in the job's order, that reported every declared metric)."""
        if meta.metrics_replica == ANY_REPLICA:
            candidates = job_replicas.replica_ids(job)
        else:
            candidates = [meta.metrics_replica or job_replicas.primary_replica_id(job)]
        missing = job_outputs.MissingMetricError(f"no replica among {candidates} reported them")
        for replica in candidates:
            lines = [line.text for line in self.logs(job, replica)]
            try:
                values = job_outputs.values(state, lines, meta.outputs)
            except job_outputs.MissingMetricError as err:
                missing = err
                continue
            return job_outputs.literal_map(values, meta.outputs)
        raise missing

    def _failure_message(self, job: Any, message: str) -> str:
        """The core's failure message and the failing replica's last log lines."""
        suspects = job_replicas.failed(job) or job_replicas.replica_ids(job)
        tails = {replica: self.log_tail(job, replica) for replica in suspects}
        blamed = next((r for r, tail in tails.items() if _shows_error(tail)), None)
        blamed = blamed or next((r for r, tail in tails.items() if tail), None)
        if blamed is None:
            return message
        return f"{message}\n--- last lines of {blamed} ---\n{tails[blamed]}"

    def log_tail(self, job: Any, replica: str, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines a replica wrote ("" when they cannot be read)."""
        try:
            texts = [line.text for line in self.logs(job, replica)]
        except NotFoundError:
            return ""
        return "\n".join(texts[-lines:])

    def logs(self, job: Any, replica: str) -> Iterator[Any]:
        return iter(self.client.logs(job.name, job.namespace, replica=replica))

    def _log_links(self, job: Any) -> list[TaskLog]:
        if not self._log_link:
            return []
        return [
            TaskLog(
                name=f"{job.name} {replica}",
                uri=self._log_link.format(namespace=job.namespace, name=job.name, replica=replica),
            )
            for replica in job_replicas.replica_ids(job)
        ]

    # --- delete ---------------------------------------------------------------------------------
    def delete(self, resource_meta: TrainingJobMetadata, **kwargs: Any) -> None:
        """Delete the job; a job that is already gone counts as deleted."""
        with contextlib.suppress(NotFoundError):
            self.client.delete(resource_meta.name, resource_meta.namespace)


def whole_numbers(node: Any) -> Any:
    """Integral floats back to ints: `custom` travels as a protobuf Struct, whose numbers are
    doubles, and the core reads `replicas: 2.0` as the error it would be in a YAML file."""
    if isinstance(node, float) and node.is_integer():
        return int(node)
    if isinstance(node, dict):
        return {key: whole_numbers(value) for key, value in node.items()}
    if isinstance(node, list):
        return [whole_numbers(item) for item in node]
    return node


def _shows_error(log_tail: str) -> bool:
    return any(marker in log_tail for marker in ERROR_MARKERS)


def _timeout(template: TaskTemplate) -> int:
    """The task's timeout in whole seconds (0: none)."""
    timeout = template.metadata.timeout if template.metadata is not None else None
    return int(timeout.total_seconds()) if timeout else 0


def _apply_timeout(manifest: dict[str, Any], template: TaskTemplate) -> None:
    """The task's timeout bounds the job (runPolicy.activeDeadlineSeconds), unless it sets one."""
    seconds = _timeout(template)
    if seconds > 0:
        policy = manifest["spec"].setdefault("runPolicy", {})
        policy.setdefault("activeDeadlineSeconds", seconds)


def _namespace(metadata: TaskExecutionMetadata | None) -> str:
    return (metadata.namespace if metadata is not None else None) or "default"


def _apply_metadata(manifest: dict[str, Any], metadata: TaskExecutionMetadata | None) -> None:
    """Flyte's labels, annotations, service account and env on the job and every replica."""
    if metadata is None:
        return
    meta = manifest.setdefault("metadata", {})
    if metadata.labels:
        meta["labels"] = {**dict(metadata.labels), **meta.get("labels", {})}
    if metadata.annotations:
        meta["annotations"] = {**dict(metadata.annotations), **meta.get("annotations", {})}
    job_replicas.apply_pod_settings(
        manifest,
        service_account=metadata.k8s_service_account or None,
        env=dict(metadata.environment_variables or {}),
        labels=dict(metadata.labels or {}),
    )


def register(connector: TrainingJobConnector | None = None) -> None:
    """Register the connector for `pyflyte serve connector` (idempotent: one per task type)."""
    from flytekit.exceptions.system import FlyteConnectorNotFound
    from flytekit.extend.backend.base_connector import ConnectorRegistry

    try:
        ConnectorRegistry.get_connector(TASK_TYPE, TASK_TYPE_VERSION)
    except FlyteConnectorNotFound:
        ConnectorRegistry.register(connector or TrainingJobConnector())
