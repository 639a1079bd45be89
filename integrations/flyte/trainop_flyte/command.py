"""`TrainingJobCommandTask`: a job whose replicas run a command (an existing job YAML) as a step.

Like flytekit's ContainerTask, but the "container" is a whole kubeflow.org/v1 job, or a Kubeflow
Trainer v2 TrainJob (planned with its runtime when the task is defined). String fields
may hold `{{.inputs.<name>}}` placeholders, filled in from the task's inputs when the job is
created. Outputs are read by name (see `trainop_flyte.outputs`): `state` is the job's final state,
`metrics` every metric the primary replica printed, any other float output the metric of that name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flytekit.configuration import SerializationSettings
from flytekit.core.base_task import PythonTask
from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.interface import Interface
from flytekit.extend.backend.base_connector import AsyncConnectorExecutorMixin

from trainop_core.api.load import read_documents
from trainop_core.api.trainjob_validation import is_v2
from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.runtimes.prepare import planned_manifest, prepare_trainjob
from trainop_flyte.cluster_trainjob import TRAINJOB_KEY
from trainop_flyte.connector import TASK_TYPE, TASK_TYPE_VERSION
from trainop_flyte.outputs import PYTHON_TYPES, role_of


class TrainingJobCommandTask(AsyncConnectorExecutorMixin, PythonTask[None]):
    """Run the job in `job` (a YAML/JSON path or a manifest dict) as one Flyte task.

    Metrics come from the primary replica (the core's choice) unless `metrics_replica` names
    another ("worker-0"), or is "any": the first replica that reported every declared metric.
    Local runs start replicas in the job file's directory, or `workdir`.
    """

    def __init__(
        self,
        name: str,
        job: str | Path | Mapping[str, Any],
        inputs: Mapping[str, type] | None = None,
        outputs: Mapping[str, Any] | None = None,
        *,
        metrics_replica: str | None = None,
        workdir: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        self._manifest, self._trainjob, file_dir = _load(job)
        self.workdir = str(Path(workdir).resolve()) if workdir is not None else file_dir
        self.metrics_replica = metrics_replica
        _check_outputs(outputs or {})
        super().__init__(
            task_type=TASK_TYPE,
            name=name,
            task_config=None,
            interface=Interface(inputs=dict(inputs or {}), outputs=dict(outputs or {})),
            task_type_version=TASK_TYPE_VERSION,
            **kwargs,
        )

    @property
    def manifest(self) -> dict[str, Any]:
        return copy.deepcopy(self._manifest)

    def get_custom(self, settings: SerializationSettings) -> dict[str, Any]:
        custom: dict[str, Any] = {"job": self.manifest}
        if self._trainjob is not None:  # also as written, for backends that store TrainJobs
            custom[TRAINJOB_KEY] = copy.deepcopy(self._trainjob)
        if self.metrics_replica:
            custom["metricsReplica"] = self.metrics_replica
        return custom

    def native_custom(self, settings: SerializationSettings) -> dict[str, Any]:
        return self.get_custom(settings)

    def execute(self, **kwargs: Any) -> Any:
        ctx = FlyteContextManager.current_context()
        if ctx.execution_state is None or not ctx.execution_state.is_local_execution():
            raise RuntimeError(f"{self.name}: a command job runs through the trainop connector")
        from trainop_flyte.local import run_job_locally

        return run_job_locally(self, kwargs)


def _load(
    job: str | Path | Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """The manifest (validated by the core), the TrainJob as written if it is one, and for a
    file the directory it resolves paths in."""
    documents = read_documents(job)
    if len(documents) != 1:
        raise InvalidJobError([Problem("", "expected exactly one job")], source=str(job))
    manifest = copy.deepcopy(dict(documents[0].data))
    trainjob = None
    if is_v2(manifest):
        # A TrainJob is planned here, with the runtimes trainop finds ($TRAINOP_RUNTIMES, else
        # its defaults), and travels as the planned job, whose replica specs the connector edits.
        trainjob, manifest = manifest, planned_manifest(prepare_trainjob(documents[0])[1])
    else:
        prepare(manifest)  # raises InvalidJobError naming every bad field
    is_file = isinstance(job, Path) or (isinstance(job, str) and Path(job).is_file())
    workdir = str(Path(job).resolve().parent) if is_file else None
    return manifest, trainjob, workdir


def _check_outputs(outputs: Mapping[str, Any]) -> None:
    for name, declared in outputs.items():
        expected = PYTHON_TYPES[role_of(name)]
        if declared != expected:
            raise TypeError(f"output {name!r}: expected type {expected}, got {declared}")
