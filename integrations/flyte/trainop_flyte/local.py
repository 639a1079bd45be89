"""Local execution: the task's job runs on the trainop local backend, through the connector.

This is what a cluster does, on this machine: flytekit's connector mixin serialises the task,
writes the inputs to `<output prefix>/inputs.pb` and renders the container args; the connector
creates the job on the local backend (each replica a process running `pyflyte-execute`, which
imports the task from its module and runs it); the primary replica writes `outputs.pb`, which is
read back here. Only the replicas' Python path and working directory are local additions.
"""

from __future__ import annotations

import inspect
import os
from collections import OrderedDict
from typing import Any

from flyteidl.core import literals_pb2
from flyteidl.core.execution_pb2 import TaskExecution
from flytekit.configuration import ImageConfig, SerializationSettings
from flytekit.core import utils
from flytekit.core.base_task import PythonTask
from flytekit.core.context_manager import FlyteContextManager
from flytekit.exceptions.user import FlyteUserException
from flytekit.extend.backend.base_connector import local_connector_loop
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskTemplate
from flytekit.tools.translator import get_serializable

from trainop_flyte.connector import TASK_TYPE, TASK_TYPE_VERSION, TrainingJobConnector

KEEP_JOBS_ENV = "TRAINOP_FLYTE_KEEP_JOBS"  # "1": keep succeeded local jobs (failed ones are kept)
LOCAL_LOGGING_ENV = {"FLYTE_SDK_RICH_TRACEBACKS": "0", "FLYTE_SDK_LOGGING_FORMAT": "text"}


class TrainingJobFailed(FlyteUserException):
    """The task's job failed; the message is the job's reason and the failing replica's log."""


def local_client() -> Any:
    from trainop_core.client import TrainingClient

    return TrainingClient(backend="local")


def run_job_locally(task: Any, inputs: dict[str, Any]) -> LiteralMap | None:
    """Run `task` (a connector-mixin task) as a job on the local backend; its output literals."""
    ctx = FlyteContextManager.current_context()
    settings = _settings(ctx.serialization_settings)
    template = native_template(task, settings)
    workdir = getattr(task, "workdir", None) or os.getcwd()
    connector = TrainingJobConnector(local_client, workdir=workdir, env=local_env(task, settings))
    task._connector = connector  # the mixin's _create/_get/signal handler use it
    output_prefix = ctx.file_access.get_random_remote_directory()
    meta = local_connector_loop.run_until_complete(
        task._create(task_template=template, output_prefix=output_prefix, inputs=inputs)
    )
    resource = local_connector_loop.run_until_complete(task._get(resource_meta=meta))
    if resource.phase != TaskExecution.SUCCEEDED:
        where = f"job {meta.namespace}/{meta.name}"
        raise TrainingJobFailed(f"task {task.name} failed ({where}): {resource.message}")
    if not os.environ.get(KEEP_JOBS_ENV):
        connector.delete(meta)
    if resource.outputs is not None:
        return resource.outputs  # type: ignore[no-any-return] # connector-built literals
    return _read_outputs(ctx, output_prefix) if template.interface.outputs else None


def _settings(current: SerializationSettings | None) -> SerializationSettings:
    if current is not None and current.image_config.default_image is not None:
        return current
    return SerializationSettings(image_config=ImageConfig.auto_default_image())


def native_template(task: PythonTask, settings: SerializationSettings) -> TaskTemplate:
    """The task's template as the connector reads it, also for compat-mode tasks."""
    template = get_serializable(OrderedDict(), settings, task).template
    if template.type == TASK_TYPE and template.k8s_pod is None:
        return template
    container = template.container
    if container is None and hasattr(task, "_get_container"):
        # a pod template (compat mode adds one): flytekit's mixin renders container args only
        container = task._get_container(settings)
    return TaskTemplate(
        id=template.id,
        type=TASK_TYPE,
        metadata=template.metadata,
        interface=template.interface,
        custom=task.native_custom(settings),
        container=container,
        task_type_version=TASK_TYPE_VERSION,
        security_context=template.security_context,
        config=template.config,
        extended_resources=template.extended_resources,
    )


def local_env(task: Any, settings: SerializationSettings) -> dict[str, str]:
    """Env a local replica needs that a pod's image provides: the task's module importable by
    the name its loader args give it (`pyflyte run file.py` imports files by path), and plain-text
    flytekit logs (outside a Flyte pod flytekit logs with rich, 80 columns wide)."""
    if not hasattr(task, "task_function"):
        return {}
    loader_args = list(task.task_resolver.loader_args(settings, task))
    roots = []
    if "task-module" in loader_args:  # flytekit's default resolver
        module = loader_args[loader_args.index("task-module") + 1]
        roots.append(module_root(module, inspect.getfile(task.task_function)))
    inherited = os.environ.get("PYTHONPATH", "")
    entries = [*roots, os.getcwd(), *([inherited] if inherited else [])]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries)), **LOCAL_LOGGING_ENV}


def module_root(module: str, source_file: str) -> str:
    """The directory from which `import <module>` finds `source_file`."""
    root = os.path.dirname(os.path.abspath(source_file))
    for _ in range(module.count(".")):
        root = os.path.dirname(root)
    return root


def _read_outputs(ctx: Any, output_prefix: str) -> LiteralMap:
    local_file = ctx.file_access.get_random_local_path()
    ctx.file_access.get_data(f"{output_prefix}/outputs.pb", local_file)
    proto = utils.load_proto_from_file(literals_pb2.LiteralMap, local_file)
    return LiteralMap.from_flyte_idl(proto)
