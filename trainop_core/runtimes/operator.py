"""TrainJobs on the operator (`--enable-scheme TrainJob`): the generic JobController, with the
TrainJob read, its runtime found in the shared caches of TrainingRuntimes and
ClusterTrainingRuntimes, and the status written as Trainer's (the planner's own record kept in
`status.plannerStatus`). Pods and services are the planner's, owned by the TrainJob.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import Document, client_view
from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.errors import InvalidJobError, TerminalError, TrainopError
from trainop_core.operator.controller import JobController
from trainop_core.operator.effects import Applier
from trainop_core.operator.informer import Informer, object_key
from trainop_core.operator.kube import Obj, Resource
from trainop_core.runtimes.catalog import RuntimeCatalog, RuntimeNotFoundError
from trainop_core.runtimes.prepare import prepare_trainjob
from trainop_core.runtimes.status import decode_status, encode_status

log = logging.getLogger(__name__)
TRAINJOBS = Resource(v2.GROUP, v2.VERSION, "trainjobs", v2.TRAINJOB)
TRAINING_RUNTIMES = Resource(v2.GROUP, v2.VERSION, "trainingruntimes", v2.TRAINING_RUNTIME)
CLUSTER_TRAINING_RUNTIMES = Resource(
    v2.GROUP, v2.VERSION, "clustertrainingruntimes", v2.CLUSTER_TRAINING_RUNTIME, namespaced=False
)


class RuntimeMissing(TrainopError):
    """Retried: the runtime a TrainJob names is not in the cache."""


class TrainJobApplier(Applier):
    def _write_status(
        self, job: Obj, status: dict[str, Any], on_write: Callable[[Obj], None] | None
    ) -> Obj | None:
        encoded = encode_status(status, job["metadata"]["name"])
        progress = (job.get("status") or {}).get("trainerStatus")
        if progress is not None:  # the progress collector's (operator/progress.py): kept
            encoded["trainerStatus"] = progress
        return super()._write_status(job, encoded, on_write)


class TrainJobController(JobController):
    """The generic controller; only reading the job and its status differ."""

    runtimes: tuple[Informer, ...] = ()

    def _not_ours(self, job: Obj) -> bool:
        managed_by = (job.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", v2.MANAGED_BY_TRAINER):
            return True  # MultiKueue's
        return bool(job.get("metadata", {}).get("deletionTimestamp"))

    def model_of(self, key: str, job: Obj) -> TrainingJob:
        """Not cached by generation like a v1 job: the translation also depends on the runtime,
        which may change or appear while the job waits for it."""
        _, model = prepare_trainjob(Document(client_view(job), ""), self.catalog())
        model.status = decode_status(job.get("status"))
        return model

    def _prepare(self, key: str, job: Obj) -> TrainingJob:
        try:
            return self.model_of(key, job)
        except RuntimeNotFoundError as exc:
            # Not the job's fault for good: the runtime may be applied after it (kubectl apply
            # of a directory). Say so on the job and look again with the queue's backoff.
            message = "; ".join(str(p) for p in exc.problems)
            self.applier.record(job, "Warning", "TrainingRuntimeNotFound", message)
            raise RuntimeMissing(message) from exc
        except InvalidJobError as exc:
            self._mark_invalid(job, exc)
            raise TerminalError(str(exc)) from exc

    def catalog(self) -> RuntimeCatalog:
        """The runtimes the shared caches hold now (the webhook checks TrainJobs with them)."""
        runtimes: list[v2.TrainingRuntime] = []
        for informer in self.runtimes:
            for obj in informer.list():
                try:
                    runtime = parse_v2(client_view(obj))
                except InvalidJobError as exc:  # a TrainJob naming it fails with the problems
                    log.info("%s: runtime %s is invalid: %s", self.name, object_key(obj), exc)
                    continue
                if isinstance(runtime, v2.TrainingRuntime):
                    runtimes.append(runtime)
        return RuntimeCatalog(tuple(runtimes))


class RuntimeHandler:
    """A runtime added or changed: look again at the TrainJobs naming it at once (one waiting
    for it with the queue's backoff would otherwise wait out its growing delay)."""

    def __init__(self, controller: TrainJobController) -> None:
        self.controller = controller

    def on_add(self, obj: Obj) -> None:
        self._enqueue_users(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._enqueue_users(new)

    def on_delete(self, obj: Obj) -> None:
        return None  # running jobs keep their pods; a new reconcile reports the runtime missing

    def _enqueue_users(self, runtime: Obj) -> None:
        kind = runtime.get("kind") or v2.CLUSTER_TRAINING_RUNTIME
        meta = runtime.get("metadata") or {}
        for job in self.controller.jobs.list():
            ref = (job.get("spec") or {}).get("runtimeRef") or {}
            same_kind = (ref.get("kind") or v2.CLUSTER_TRAINING_RUNTIME) == kind
            visible = kind == v2.CLUSTER_TRAINING_RUNTIME or meta.get("namespace") == (
                job.get("metadata") or {}
            ).get("namespace")
            if same_kind and visible and ref.get("name") == meta.get("name"):
                self.controller.enqueue(job)
