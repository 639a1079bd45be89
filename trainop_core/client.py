"""`TrainingClient`: the one interface to run training jobs, whatever runs them.

The CLI and every integration (Flyte, KFP, the Ray Tune trial runner) use this class and nothing
below it. The backend is chosen by name ("local", the default; "kubernetes"; "ray") or passed in
as an object implementing `trainop_core.backends.base.Backend` (tests inject fakes that way).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from trainop_core.api.admission import AdmissionWarning, admission_warnings
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import Document, read_documents
from trainop_core.api.names import check_job_ref, check_namespace, check_replica
from trainop_core.api.types import ConditionType
from trainop_core.backends.base import (
    Backend,
    Followable,
    Inspectable,
    JobEvent,
    LogLine,
    QueueInspector,
    Recoverable,
    TrainJobStore,
    Waiter,
)
from trainop_core.errors import DamagedJobError, InvalidJobError, JobTimeoutError, Problem
from trainop_core.kinds.base import Kind
from trainop_core.planner.conditions import is_finished as status_finished
from trainop_core.planner.conditions import is_true
from trainop_core.planner.types import ObservedPod
from trainop_core.replicas import primary_replica as primary_of
from trainop_core.replicas import replica_id
from trainop_core.runtimes.origins import own_paths
from trainop_core.runtimes.prepare import (
    RuntimeSource,
    check_trainjob,
    prepare_trainjob,
    v2_document,
)

JobSource = TrainingJob | str | Path | Mapping[str, Any]


class TrainingClient:
    """Create, watch and remove training jobs on one backend.

    Job identity is namespace/name. Every method may do I/O through the backend.
    """

    def __init__(self, backend: str | Backend = "local", **backend_options: Any) -> None:
        if isinstance(backend, str):
            from trainop_core.backends import resolve_backend

            backend = resolve_backend(backend, **backend_options)
        elif backend_options:
            raise TypeError("backend options are only accepted with a backend name")
        self.backend: Backend = backend
        # Optional capabilities, resolved once.
        self._recoverable = backend if isinstance(backend, Recoverable) else None
        self._waiter = backend if isinstance(backend, Waiter) else None
        self._followable = backend if isinstance(backend, Followable) else None
        self._queues = backend if isinstance(backend, QueueInspector) else None
        self._trainjobs = backend if isinstance(backend, TrainJobStore) else None
        self._inspectable = backend if isinstance(backend, Inspectable) else None

    @property
    def default_namespace(self) -> str:
        """The namespace jobs go to and are looked up in when none is given. That is the
        backend's default (the kubeconfig context's namespace on Kubernetes), else "default"."""
        return str(getattr(self.backend, "default_namespace", "") or "default")

    def _ref(self, name: str, namespace: str | None) -> str:
        """The namespace to use for `name`; InvalidNameError before any backend is asked if
        either could never name a job (so no lookup reaches outside the backend's store)."""
        namespace = namespace or self.default_namespace
        check_job_ref(name, namespace)
        return namespace

    def create(
        self,
        job: JobSource,
        *,
        namespace: str | None = None,
        workdir: str | Path | None = None,
        runtimes: RuntimeSource = None,
    ) -> TrainingJob:
        """Validate, default and start `job` (a model, a YAML/JSON file path or text, a dict).

        Raises InvalidJobError listing every problem (nothing is created then), and
        AlreadyExistsError if namespace/name exists (finished jobs exist until deleted). Issues
        an `AdmissionWarning` (Python's `warnings`) for each warning upstream's webhook would
        give, such as a deprecated field; the job is created all the same. Relative
        paths in the job (e.g. `command: [python, train.py]`) resolve against `workdir` if given,
        else the job file's directory when created from a file, else the current directory
        (the backend is then told none was chosen: the Ray backend then ships no directory).
        A Kubeflow Trainer v2 TrainJob runs with its runtime found in `runtimes` (a directory
        of runtime YAML files, searched before the defaults trainop ships; default
        $TRAINOP_RUNTIMES) and is stored, listed and followed as kind TrainJob. On a backend
        that stores TrainJobs as such (kubernetes) its runtime must be one that backend holds
        (`runtimes` must then be None), and it is stored as written.
        """
        stored = self._create_trainjob(job, namespace, runtimes)
        if stored is not None:
            return stored
        kind, prepared, origin = prepare_source(job, namespace, runtimes)
        for warning in admission_warnings(prepared, kind):
            warnings.warn(AdmissionWarning(str(warning)), stacklevel=2)
        chosen = workdir is not None or _as_path(job) is not None
        where = (Path(workdir).resolve() if workdir is not None else origin) if chosen else None
        with own_paths(prepared):  # a TrainJob's problems name its own fields, on any backend
            return self.backend.create(prepared, kind, workdir=where)

    def _create_trainjob(
        self, source: JobSource, namespace: str | None, runtimes: RuntimeSource
    ) -> TrainingJob | None:
        """A TrainJob on a TrainJobStore backend: checked (before any request where it is
        invalid in itself), its runtime found among the backend's, then stored as written.
        None if `source` is not a TrainJob or the backend plans TrainJobs like any job."""
        if self._trainjobs is None or isinstance(source, TrainingJob):
            return None
        path = _as_path(source)
        doc = _trainjob_document(path if path is not None else source)
        if doc is None:
            return None
        if runtimes is not None:
            message = (
                f"the {self.backend.name} backend runs a TrainJob with the runtimes it holds: "
                "apply the runtimes there instead"
            )
            raise InvalidJobError([Problem("runtimes", message)], source=doc.source)
        check_trainjob(doc)
        meta = doc.data.get("metadata") or {}
        where = namespace or meta.get("namespace") or self.default_namespace
        kind, planned = prepare_trainjob(doc, self._trainjobs.runtime_catalog(where), where)
        if namespace is not None:
            _set_namespace(planned, namespace, doc.source)
        for warning in admission_warnings(planned, kind):
            warnings.warn(AdmissionWarning(str(warning)), stacklevel=3)
        return self._trainjobs.create_trainjob(doc.data, planned)

    def get(self, name: str, namespace: str | None = None) -> TrainingJob:
        """The job with its current status; NotFoundError if there is none."""
        return self.backend.get(name, self._ref(name, namespace))

    def list(self, namespace: str | None = None) -> list[TrainingJob]:
        """Jobs of one namespace, or of all namespaces when None."""
        if namespace is not None:
            check_namespace(namespace)
        return self.backend.list(namespace)

    def queue_reasons(self, jobs: Sequence[TrainingJob]) -> dict[str, str]:
        """Why each of `jobs` that waits in a queue has not been admitted yet, by job uid (on
        Kubernetes: Kueue's reason from the job's Workload); empty where no queue is known."""
        return self._queues.queue_reasons(jobs) if self._queues is not None else {}

    def wait(
        self,
        name: str,
        namespace: str | None = None,
        timeout: float | None = None,
        *,
        poll: float = 0.2,
    ) -> TrainingJob:
        """Block until the job has Succeeded or Failed and return it (a Failed job is returned,
        not raised). Raises JobTimeoutError after `timeout` seconds (the job keeps running) and
        NotFoundError if the job does not exist or is deleted meanwhile. On the local backend a
        job whose supervisor died is taken over by a new one (see `backends.local.supervisor`).
        `poll` is the polling interval for backends that cannot watch."""
        namespace = self._ref(name, namespace)
        if self._waiter is not None:
            return self._waiter.wait(name, namespace, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._following(name, namespace):
            while True:
                job = self.get(name, namespace)
                if is_finished(job):
                    return job
                if damage(job):
                    raise DamagedJobError(damage(job))
                if self._recoverable is not None and supervisor_lost(job):
                    self._recoverable.recover(name, namespace)
                if deadline is not None and time.monotonic() >= deadline:
                    raise JobTimeoutError(
                        f"job {namespace}/{name} did not finish within {timeout:g} s "
                        f"(state {job_state(job)}); it is still running"
                    )
                left = poll if deadline is None else deadline - time.monotonic()
                time.sleep(max(0.0, min(poll, left)))

    def _following(self, name: str, namespace: str) -> AbstractContextManager[None]:
        if self._followable is None:
            return contextlib.nullcontext()
        return self._followable.following(name, namespace)

    def logs(
        self,
        name: str,
        namespace: str | None = None,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        """Replicas' output lines tagged with their replica ("master-0"); only `replica`'s if
        given. With `follow`, streams until the job has finished. With `tail`, each replica's
        last `tail` lines so far come first (the earlier ones are not read: a huge log costs
        nothing), then, with `follow`, what it writes next."""
        namespace = self._ref(name, namespace)
        if replica is not None:
            check_replica(replica)
        if tail is not None and tail < 0:
            raise ValueError(f"tail must not be negative, got {tail}")
        if follow and self._recoverable is not None:
            self._recoverable.recover(name, namespace)
        return self.backend.logs(name, namespace, replica, follow, tail)

    def replicas(self, name: str, namespace: str | None = None) -> builtins.list[ObservedPod]:
        """The job's replicas as last seen (phase, restarts, exit code, reason), in the kind's
        replica order; empty where the backend cannot say. NotFoundError for an unknown job."""
        namespace = self._ref(name, namespace)
        if self._inspectable is None:
            self.get(name, namespace)
            return []
        return self._inspectable.replicas(name, namespace)

    def events(self, name: str, namespace: str | None = None) -> builtins.list[JobEvent]:
        """The job's events, oldest first; empty where the backend keeps none. NotFoundError for
        an unknown job."""
        namespace = self._ref(name, namespace)
        if self._inspectable is None:
            self.get(name, namespace)
            return []
        return self._inspectable.events(name, namespace)

    def delete(self, name: str, namespace: str | None = None) -> None:
        """Stop every replica and remove the job, logs included. NotFoundError if it does not
        exist (not idempotent, like `kubectl delete`: a second call raises)."""
        self.backend.delete(name, self._ref(name, namespace))

    def stop(
        self, name: str, namespace: str | None = None, reason: str = "stopped by user"
    ) -> None:
        """Stop every replica of an unfinished job and record it Failed with `reason`; the job
        stays until deleted. Idempotent."""
        self.backend.stop(name, self._ref(name, namespace), reason)

    def suspend(self, name: str, namespace: str | None = None) -> None:
        """Set spec.runPolicy.suspend: every replica is stopped, the job waits for `resume`."""
        self.backend.set_suspended(name, self._ref(name, namespace), True)

    def resume(self, name: str, namespace: str | None = None) -> None:
        """Clear spec.runPolicy.suspend: replicas start again (activeDeadline clock restarts)."""
        self.backend.set_suspended(name, self._ref(name, namespace), False)


# --- helpers integrations use ---------------------------------------------------------------------
def job_state(job: TrainingJob) -> str:
    """The newest condition that holds (status True): Created, Running, Restarting, Succeeded,
    Failed or Suspended; before the job has any, "Queued" while the local queue holds it
    (`queue_message` says why), else "Pending"."""
    conditions = job.status.conditions if job.status else []
    held = [c for c in conditions if c.status.value == "True"]
    if held:
        return held[-1].type.value
    annotations = job.metadata.annotations or {}
    return "Queued" if annotations.get("local.trainop.dev/queue-state") == "Queued" else "Pending"


def queue_message(job: TrainingJob) -> str:
    """Why the local queue holds the job ("" if it does not)."""
    if job_state(job) != "Queued":
        return ""
    return (job.metadata.annotations or {}).get("local.trainop.dev/queue-message", "")


def is_finished(job: TrainingJob) -> bool:
    """Whether the job has Succeeded or Failed."""
    return job.status is not None and status_finished(job.status)


def is_succeeded(job: TrainingJob) -> bool:
    return job.status is not None and is_true(job.status, ConditionType.SUCCEEDED)


def failure_message(job: TrainingJob) -> str:
    """Why a finished job failed, in one line for a person ("" if it has not failed). Every
    integration reports a failure with this text, then adds its own context (log tails).

    In order: the message of the newest Failed condition, which whoever failed the job wrote at
    that moment and which names the cause (which replicas failed, the backoff limit, the
    deadline, validation problems, a user's stop): it is what `kubectl describe` shows upstream
    users. Else the replica types the status counts failed replicas for, with the condition's
    reason: the status always has the counts, even when a writer left the message empty. Else a
    generic text naming the job, so a failure is never reported with an empty message.
    """
    conditions = job.status.conditions if job.status is not None else []
    failed = [c for c in conditions if c.type == ConditionType.FAILED and c.status.value == "True"]
    if not failed:
        return ""
    if failed[-1].message:
        return failed[-1].message
    statuses = job.status.replica_statuses if job.status is not None else {}
    replicas = [f"{s.failed} {rtype}" for rtype, s in statuses.items() if s.failed]
    reason = failed[-1].reason or f"{job.kind}Failed"
    if replicas:
        return f"{reason}: {', '.join(replicas)} replica(s) failed"
    return f"{job.kind} {job.key} failed ({reason}; no message recorded)"


def primary_replica(job: TrainingJob, kind: Kind | None = None) -> str:
    """The replica whose output is the job's result, as "master-0": its log carries the metrics
    the integrations read, and a Flyte function task returns its value. One definition per kind
    (`Kind.primary_types`): TF chief, else master, else worker 0; PyTorch and XGBoost master 0
    (worker 0 without a master); MXNet worker 0 (each kind module says). Not the
    `job-role: master` label, which keeps upstream's quirk of marking MXNet's Servers."""
    return replica_id(*primary_of(job, kind or _kind_of(job)))


def supervisor_lost(job: TrainingJob) -> bool:
    annotations = job.metadata.annotations or {}
    return annotations.get("local.trainop.dev/supervisor") == "lost"


def damage(job: TrainingJob) -> str:
    """What is wrong with a job whose stored state cannot be read (a stand-in the local backend
    lists so that it can be seen and deleted); "" for a sound job."""
    annotations = job.metadata.annotations or {}
    return annotations.get("local.trainop.dev/damaged", "")


# --- input ----------------------------------------------------------------------------------------
def prepare_source(
    source: JobSource, namespace: str | None = None, runtimes: RuntimeSource = None
) -> tuple[Kind, TrainingJob, Path]:
    """Load, default and validate one job; also the directory its relative paths resolve in.
    A TrainJob (trainer.kubeflow.org) runs with its runtime from `runtimes`
    (`trainop_core.runtimes.prepare.catalog_for`)."""
    from trainop_core.api.validation import prepare

    path = _as_path(source)
    v2 = _trainjob_document(path if path is not None else source)
    kind, job = (
        prepare_trainjob(v2, runtimes, namespace)
        if v2 is not None
        else prepare(path if path is not None else source)
    )
    workdir = path.resolve().parent if path is not None else Path(os.getcwd())
    if namespace is not None:
        _set_namespace(job, namespace, str(path or ""))
    return kind, job, workdir


def _trainjob_document(source: JobSource) -> Document | None:
    if isinstance(source, TrainingJob):
        return None
    return v2_document(read_documents(source))


def _as_path(source: JobSource) -> Path | None:
    if isinstance(source, Path):
        return source
    if isinstance(source, str) and source.strip() and _one_line_name(source):
        return Path(source)
    return None


def _one_line_name(text: str) -> bool:
    """Could this be a file name (else it is YAML/JSON text)?"""
    from trainop_core.api.load import MAX_PATH_CHARS

    flow = text.lstrip().startswith("{")
    return not flow and "\n" not in text and "\0" not in text and len(text) <= MAX_PATH_CHARS


def _set_namespace(job: TrainingJob, namespace: str, origin: str) -> None:
    written = job.metadata.namespace
    if written and written != namespace:
        message = f"is {written!r} but namespace {namespace!r} was asked for"
        problem = Problem("metadata.namespace", message)
        raise InvalidJobError([problem], source=origin, job=f"{job.kind}/{job.name}")
    from trainop_core.api.validation import check_metadata

    problems = check_metadata(job.name, namespace)
    if not isinstance(namespace, str):
        problems.append(Problem("metadata.namespace", f"expected a string, got {namespace!r}"))
    if problems:
        raise InvalidJobError(problems, source=origin, job=f"{job.kind}/{job.name}")
    job.metadata.namespace = namespace


def _kind_of(job: TrainingJob) -> Kind:
    from trainop_core.api.load import default_registry

    return default_registry().get(job.kind)
