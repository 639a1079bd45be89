"""`@task(task_config=TrainingJob(...))`: the decorated function runs on every replica of a job
(`TrainJob(...)`: on every node of a Kubeflow Trainer v2 TrainJob, see `trainop_flyte.trainjob`).

Serialised, the task is type `trainop_training_job` (custom: the job manifest, filled in by the
connector with the task's own container) or, with `compat=True`, Flyte's own `pytorch` /
`tensorflow` type. Called locally (a plain call, a workflow, `pyflyte run`) it runs the job on the
trainop local backend, each replica a real process running `pyflyte-execute` like a pod would.
Inside a replica the function runs; only the primary replica writes the task's outputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from flytekit import PythonFunctionTask
from flytekit.configuration import SerializationSettings
from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.context_manager import FlyteContextManager
from flytekit.extend import TaskPlugins
from flytekit.extend.backend.base_connector import AsyncConnectorExecutorMixin

from trainop_core.replicas import launched_rank
from trainop_flyte import compat
from trainop_flyte.cluster_trainjob import TRAINJOB_KEY
from trainop_flyte.config import TrainingJob
from trainop_flyte.connector import TASK_TYPE, TASK_TYPE_VERSION
from trainop_flyte.replicas import REPLICA_INDEX_ENV, REPLICA_TYPE_ENV, primary_replica_id
from trainop_flyte.spec import Container, build_job, job_manifest, kind_of
from trainop_flyte.trainjob import TrainJob, plan, planned_job_manifest, trainjob_manifest
from trainop_flyte.trainjob import launched_rank as trainjob_rank

_VALIDATION_CONTAINER = Container(image="flyte-task-image", command=["pyflyte-execute"])


class TrainingJobFunctionTask(
    AsyncConnectorExecutorMixin, PythonFunctionTask[TrainingJob | TrainJob]
):
    """A Python function run by every replica of a trainop job."""

    def __init__(
        self,
        task_config: TrainingJob | TrainJob,
        task_function: Callable[..., Any],
        **kwargs: Any,
    ) -> None:
        self._job = _build(task_config)  # core errors, with paths
        if isinstance(task_config, TrainingJob) and task_config.compat:
            task_type, version = compat.task_type(task_config), compat.TASK_TYPE_VERSION
            compat.custom(task_config, self._job)  # fail now if Flyte cannot express it
            if kwargs.get("pod_template") is None:
                kwargs["pod_template"] = compat.identity_pod_template()
        else:
            task_type, version = TASK_TYPE, TASK_TYPE_VERSION
        super().__init__(
            task_config=task_config,
            task_function=task_function,
            task_type=task_type,
            task_type_version=version,
            **kwargs,
        )

    def get_custom(self, settings: SerializationSettings) -> dict[str, Any]:
        if isinstance(self.task_config, TrainingJob) and self.task_config.compat:
            return compat.custom(self.task_config, self._job)
        return self.native_custom(settings)

    def native_custom(self, settings: SerializationSettings) -> dict[str, Any]:
        """The connector's custom: the job manifest, every replica on the task's image."""
        container = Container(image=self.get_image(settings))
        if isinstance(self.task_config, TrainJob):  # the planned job, and the TrainJob itself
            return {
                "job": planned_job_manifest(self.task_config, container, name=""),
                TRAINJOB_KEY: trainjob_manifest(self.task_config, container, name=""),
            }
        return {"job": job_manifest(self.task_config, container, name="")}

    def execute(self, **kwargs: Any) -> Any:
        ctx = FlyteContextManager.current_context()
        if ctx.execution_state is not None and ctx.execution_state.is_local_execution():
            from trainop_flyte.local import run_job_locally

            return run_job_locally(self, kwargs)
        return self.execute_as_replica(**kwargs)

    def execute_as_replica(self, **kwargs: Any) -> Any:
        """Run the function here (one replica); raise IgnoreOutputs unless this is the primary."""
        primary = self.is_primary_replica()  # before the work: it raises if it cannot tell
        result = PythonFunctionTask.execute(self, **kwargs)
        if not primary:
            raise IgnoreOutputs("not the primary replica: its outputs are discarded")
        return result

    def is_primary_replica(self) -> bool:
        """Whether this process is the replica whose result the task returns: under a launcher
        (MPI's mpirun), the process of rank 0."""
        rank = trainjob_rank(self._job, os.environ)
        if rank is None:
            rank = launched_rank(kind_of(self._job.kind), os.environ)
        if rank is not None:
            return rank == 0
        mine = os.environ.get(REPLICA_TYPE_ENV)
        if not mine:
            return True  # started by neither trainop nor compat's pod template: cannot tell
        primary = primary_replica_id(self._job)
        if not primary.startswith(f"{mine.lower()}-"):
            return False
        count = next(
            spec.replicas or 0
            for rtype, spec in self._job.spec.replica_specs.items()
            if rtype.lower() == mine.lower()
        )
        return f"{mine.lower()}-{_my_index(count)}" == primary


def _build(config: TrainingJob | TrainJob) -> Any:
    if isinstance(config, TrainJob):
        return plan(config, _VALIDATION_CONTAINER)
    return build_job(config, _VALIDATION_CONTAINER)


def _my_index(replicas_of_my_type: int) -> int:
    raw = os.environ.get(REPLICA_INDEX_ENV, "")
    if raw.isdigit():
        return int(raw)
    if replicas_of_my_type == 1:
        return 0
    raise RuntimeError(
        f"cannot tell which replica this is: ${REPLICA_INDEX_ENV} is not set (it comes from the"
        " pod's replica-index label through the downward API)"
    )


def register() -> None:
    """Make `@task(task_config=TrainingJob(...))` and `@task(task_config=TrainJob(...))` build a
    TrainingJobFunctionTask (idempotent)."""
    TaskPlugins.register_pythontask_plugin(TrainingJob, TrainingJobFunctionTask)
    TaskPlugins.register_pythontask_plugin(TrainJob, TrainingJobFunctionTask)
