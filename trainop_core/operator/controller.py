"""One job kind's controller: a work queue, worker threads, and a reconcile that plans and applies.

The controller reads only from the shared caches (plus a live GET after a lost status race), runs
the pure core planner, and hands the Plan to the `Applier`. Result semantics follow
controller-runtime: an error requeues with per-item backoff; `TerminalError` is not retried; a
plan's `requeue_after` schedules the next look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from trainop_core.api.admission import EVENT_REASON, admission_warnings
from trainop_core.api.job import TrainingJob
from trainop_core.api.types import MANAGED_BY_OPERATOR, utc_now
from trainop_core.decorators.decoration import Decorators
from trainop_core.errors import InvalidJobError, TerminalError, TrainopError
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.effects import Applier, StatusConflict, expectation_keys
from trainop_core.operator.expectations import EXPECTATIONS_TTL, Expectations
from trainop_core.operator.informer import Informer, object_key, resource_version
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB, too_many_replicas
from trainop_core.operator.kube import ApiError, KubeClient, Obj, Resource
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.observe import observe
from trainop_core.operator.prepared import PreparedJobs
from trainop_core.operator.workqueue import WorkQueue
from trainop_core.planner import plan as make_plan
from trainop_core.planner.addressing import KubernetesAddressing
from trainop_core.planner.types import Plan, PlanOptions
from trainop_core.replicas import primary_replica

log = logging.getLogger(__name__)

STALE_CACHE_RETRY = 0.5  # seconds: look again after AlreadyExists told us the cache is behind


class ReconcileError(Exception):
    """Some API calls of a plan failed; retried with the queue's backoff."""


@dataclass
class Caches:
    """The shared informers every controller reads (PodGroups only with gang scheduling)."""

    pods: Informer
    services: Informer
    pod_groups: Informer | None = None


@dataclass
class _Writes:
    """One job's own writes, as `JobController.wrote` needs them."""

    sending: set[str] = field(default_factory=set)  # versions a write is sent over, in flight
    answers: deque[str] = field(default_factory=lambda: deque(maxlen=4))  # the latest answers


class JobController:
    """Reconciles jobs of one kind. Thread-safe: the queue never hands one key to two workers."""

    def __init__(
        self,
        kind: Kind,
        registry: KindRegistry,
        resource: Resource,
        jobs: Informer,
        caches: Caches,
        applier: Applier,
        client: KubeClient,
        expectations: Expectations,
        metrics: OperatorMetrics,
        options: PlanOptions,
        decorators: Decorators | None = None,
        max_replicas: int = MAX_REPLICAS_PER_JOB,
    ) -> None:
        self.kind, self.registry, self.resource = kind, registry, resource
        self.decorators = decorators
        self.max_replicas = max_replicas  # of one job, in all (--max-replicas-per-job)
        self.jobs, self.caches, self.applier = jobs, caches, applier
        self.client, self.expectations, self.metrics = client, expectations, metrics
        self.plan_options = options
        self.name = kind.controller_name
        self.queue = WorkQueue(self.name, metrics=metrics)
        self.prepared = PreparedJobs(registry)  # each job prepared once per generation
        # key -> (superseded resourceVersions, fresher object or None = GET it): our own status
        # writes and lost races, so a lagging job watch cannot make us plan from an old status.
        self._fresher: dict[str, tuple[frozenset[str], Obj | None]] = {}
        # key -> our writes to the job: the versions being written over now, the latest answers
        self._writes: dict[str, _Writes] = {}
        # key -> uid of the job this controller deleted (its TTL), until the job's cache entry
        # goes: the garbage collector's pod deletions often arrive before the job's own delete
        # event and would make a plan from the cached job delete it again (a 404; 1,667 of the
        # 10,000-job benchmark's 10,000 deletions were sent twice)
        self._deleted: dict[str, str] = {}
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []

    # --- workers -------------------------------------------------------------------------------
    def start_workers(self, count: int, stop: threading.Event) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._work, args=(stop,), daemon=True, name=f"{self.name}-{i}")
            for i in range(count)
        ]
        for thread in threads:
            thread.start()
        self._workers += threads
        return threads

    def workers_alive(self) -> bool:
        """Every started worker is running, or the manager is stopping (/healthz: a controller
        whose workers all ended would leave its jobs unreconciled while the process looks fine;
        failing liveness gets it restarted, and a restarted operator loses no job)."""
        return self.queue.shutting_down or all(t.is_alive() for t in self._workers)

    def _work(self, stop: threading.Event) -> None:
        """Until the manager stops: `get` without a timeout answers None only at shutdown."""
        while not stop.is_set():
            key = self.queue.get()
            if key is None:
                return
            try:
                self._process(str(key))
            finally:
                self.queue.done(key)

    def _process(self, key: str) -> None:
        started = time.monotonic()
        result = "success"
        log.debug("%s %s: reconcile", self.name, key)
        try:
            requeue_after = self.reconcile(key)
            self.queue.forget(key)
            if requeue_after is not None:
                self.queue.add_after(key, requeue_after)
                result = "requeue_after"
        except TerminalError as exc:
            self.queue.forget(key)
            result = "error"
            self.metrics.reconcile_errors.inc(controller=self.name)
            log.warning("%s %s: terminal: %s", self.name, key, exc)
        except Exception as exc:  # any failure is retried with backoff
            self.queue.add_rate_limited(key)
            result = "requeue" if isinstance(exc, StatusConflict) else "error"
            if result == "error":
                self.metrics.reconcile_errors.inc(controller=self.name)
            log.info("%s %s: %s: %s", self.name, key, type(exc).__name__, exc)
        log.debug("%s %s: %s in %.3f s", self.name, key, result, time.monotonic() - started)
        self.metrics.reconcile_total.inc(controller=self.name, result=result)
        self.metrics.reconcile_time.observe(time.monotonic() - started, controller=self.name)

    # --- reconcile -----------------------------------------------------------------------------
    def reconcile(self, key: str) -> float | None:
        """One pass for job `key`; returns seconds until the next look, or None."""
        job = self._read_job(key)
        if job is None:
            self._forget(key)
            return None
        if self._not_ours(job) or self._deleted_by_us(key, job):
            return None
        if not self._expectations_satisfied(job):
            return EXPECTATIONS_TTL  # informer events normally requeue long before
        model = self._prepare(key, job)
        self._refuse_oversized(job, model)
        self._record_admission_warnings(job, model)
        plan = self._plan(job, model)
        plan = self._decorate(model, plan)
        return self._apply(key, job, plan)

    def _read_job(self, key: str) -> Obj | None:
        cached = self.jobs.get(key)
        with self._lock:
            stale, fresher = self._fresher.get(key, (frozenset(), None))
            if cached is None or resource_version(cached) not in stale:
                self._fresher.pop(key, None)
                return cached
        if fresher is not None:
            return fresher
        ns, _, name = key.rpartition("/")
        try:
            return self.client.get(self.resource, ns, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def _forget(self, key: str) -> None:
        ns, _, name = key.rpartition("/")
        for exp_key in expectation_keys(self.kind, ns, name):
            self.expectations.forget(exp_key)
        self.applier.objects.forget(ns, name)
        self.applier.recorder.forget(ns, name)
        self.prepared.forget(key)
        with self._lock:
            self._fresher.pop(key, None)
            self._writes.pop(key, None)
            self._deleted.pop(key, None)

    def _not_ours(self, job: Obj) -> bool:
        """Managed by another controller (MultiKueue), or being deleted (GC handles children)."""
        managed_by = (job.get("spec", {}).get("runPolicy") or {}).get("managedBy")
        if managed_by not in (None, "", MANAGED_BY_OPERATOR):
            return True
        return bool(job.get("metadata", {}).get("deletionTimestamp"))

    def _deleted_by_us(self, key: str, job: Obj) -> bool:
        """This controller deleted `job` (same uid): nothing is left to plan for it."""
        with self._lock:
            deleted = self._deleted.get(key)
        return deleted is not None and deleted == job["metadata"].get("uid", "")

    def _expectations_satisfied(self, job: Obj) -> bool:
        meta = job["metadata"]
        keys = expectation_keys(self.kind, meta.get("namespace", "default"), meta["name"])
        return all(self.expectations.satisfied(k) for k in keys)

    def _prepare(self, key: str, job: Obj) -> TrainingJob:
        try:
            return self.model_of(key, job)
        except InvalidJobError as exc:
            self._mark_invalid(job, exc)
            raise TerminalError(str(exc)) from exc

    def _refuse_oversized(self, job: Obj, model: TrainingJob) -> None:
        """A job of more replicas than this operator runs is failed as an invalid one, before
        anything is planned for it (planning is replica by replica; the check reads counts)."""
        problems = too_many_replicas(model, self.kind, self.max_replicas)
        if problems:
            exc = InvalidJobError(problems)
            self._mark_invalid(job, exc)
            raise TerminalError(str(exc))

    def model_of(self, key: str, job: Obj) -> TrainingJob:
        """The prepared model of the cached `job` (kept per generation); InvalidJobError if it
        is not valid. Writes nothing."""
        return self.prepared.get(key, job)

    def cached_job(self, key: str) -> Obj | None:
        return self.jobs.get(key)

    def primary_replica(self, key: str) -> tuple[str, int] | None:
        """(replica type, index) of the replica whose output is the job's (its progress), None
        if the job is not cached or not valid. No I/O."""
        job = self.jobs.get(key)
        if job is None:
            return None
        try:
            return primary_replica(self.model_of(key, job), self.kind)
        except TrainopError:
            return None

    def _record_admission_warnings(self, job: Obj, model: TrainingJob) -> None:
        """Record them on the job, once, on its first reconcile (before any condition is
        written): a cluster may run without the webhook that returns them to kubectl."""
        if (job.get("status") or {}).get("conditions"):
            return
        for warning in admission_warnings(model, self.kind):
            self.applier.record(job, "Warning", EVENT_REASON, str(warning))

    def _plan(self, job: Obj, model: TrainingJob) -> Plan:
        caches = self.caches
        owner = f"{model.namespace}/{job['metadata'].get('uid', '')}"
        pod_group = caches.pod_groups.get(model.key) if caches.pod_groups else None
        observed = observe(
            caches.pods.by_index("owner", owner),
            caches.services.by_index("owner", owner),
            pod_group,
            self.kind,
        )
        addressing = KubernetesAddressing(model, self.kind, self.plan_options.cluster_domain)
        in_process = self.decorators.in_process if self.decorators else ()
        return make_plan(
            model, self.kind, observed, utc_now(), addressing, self.plan_options, in_process
        )

    def _decorate(self, model: TrainingJob, plan: Plan) -> Plan:
        """The decorator servers' changes to the pods the plan creates (calls only when it
        creates pods whose answer is not cached: see `decorators.decoration`)."""
        if self.decorators is None:
            return plan
        return self.decorators.servers.decorate(model, self.kind, plan).plan

    def _apply(self, key: str, job: Obj, plan: Plan) -> float | None:
        pod_group = self.caches.pod_groups.get(key) if self.caches.pod_groups else None
        try:
            outcome = self.applier.apply(
                job, plan, pod_group, on_status=self._remember(key), on_write=self._writing(key)
            )
        except StatusConflict:
            self._remember(key)(None, (resource_version(job),))
            raise
        finally:
            with self._lock:
                if key in self._writes:
                    self._writes[key].sending.clear()  # none in flight any more
        if outcome.job_deleted:
            with self._lock:
                self._deleted[key] = str(job["metadata"].get("uid", ""))
        if outcome.errors:
            raise ReconcileError("; ".join(outcome.errors))
        if outcome.cache_stale:
            return min(plan.requeue_after or STALE_CACHE_RETRY, STALE_CACHE_RETRY)
        return plan.requeue_after

    def _remember(self, key: str) -> Callable[[Obj | None, tuple[str, ...]], None]:
        """While the cache still holds a `superseded` version, read `written` (None: GET).

        Superseded versions accumulate: after two writes while the job watch lags, the cache may
        still hold the version the first write superseded, and must not be planned from.
        """

        def remember(written: Obj | None, superseded: tuple[str, ...]) -> None:
            with self._lock:
                stale, _ = self._fresher.get(key, (frozenset(), None))
                self._fresher[key] = (stale | frozenset(superseded), written)
                if written is not None:
                    self._writes.setdefault(key, _Writes()).answers.append(
                        resource_version(written)
                    )

        return remember

    def _mark_invalid(self, job: Obj, exc: InvalidJobError) -> None:
        """No webhook refused it (none registered, or it was down with Ignore): fail the job
        once, with the problems in the condition."""
        conditions = (job.get("status") or {}).get("conditions") or []
        reason = f"{self.kind.kind}FailedValidation"
        if any(c.get("reason") == reason for c in conditions):
            return
        now = utc_now().strftime("%Y-%m-%dT%H:%M:%SZ")
        message = "; ".join(str(p) for p in exc.problems)[:1024]
        failed = {
            "type": "Failed",
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
        status = dict(job.get("status") or {}, conditions=[*conditions, failed])
        meta = job["metadata"]
        try:
            self.client.replace_status(
                self.resource,
                meta.get("namespace", "default"),
                meta["name"],
                dict(job, status=status),
            )
        except ApiError as err:
            log.info("%s %s: could not mark invalid: %s", self.name, object_key(job), err)
        self.applier.record(job, "Warning", reason, message)

    # --- event handlers (informer threads) -----------------------------------------------------
    def enqueue(self, obj: Obj) -> None:
        self.queue.add(object_key(obj))

    def _writing(self, key: str) -> Callable[[Obj], None]:
        def writing(job: Obj) -> None:
            with self._lock:
                self._writes.setdefault(key, _Writes()).sending.add(resource_version(job))

        return writing

    def wrote(self, old: Obj, new: Obj) -> bool:
        """Is the change from `old` to `new` one of our own writes to the job, planned from
        everything `new` holds? Every job write is guarded by the resourceVersion it is sent
        over, so `new` is ours when it is a write's answer, and a change from a version we are
        writing over now is ours unless our write fails, which plans again anyway."""
        with self._lock:
            writes = self._writes.get(object_key(new))
            if writes is None:
                return False
            return (
                resource_version(new) in writes.answers or resource_version(old) in writes.sending
            )
