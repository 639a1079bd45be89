"""Calling decorator servers: the effects-layer step every backend runs between planning and
applying a plan (the operator's controller, the local and Ray supervisors, `trainop render`).

For each server that selects the job (kinds, namespace labels, job labels), in configuration
order, and each replica type the plan creates pods of: the server's verdict for (job uid,
generation, replica type) comes from a cache, else from one call; a patch is applied to every pod
of the type (`guard` refuses what it may not change). A steady job creates no pods and so makes
no calls; a new generation or a lost cache makes one call per replica type and server.

When a server fails (unreachable, too slow, garbage, too large, a forbidden patch, or a patch
that does not apply) or refuses the job:

- `failurePolicy: Fail` — nothing of the plan is created (no pod, no service: never a
  half-created job), the job is marked Failed (reason `<Kind>FailedDecoration`) and a Warning
  event `FailedDecoration` names the server and the cause. A refusal does the same whatever the
  policy: it is an answer, not a failure to get one;
- `failurePolicy: Ignore` — the pods of that replica type are created without that server's
  change, and a Warning event `DecorationIgnored` says so.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import JobStatus
from trainop_core.decorators.builtin import PodDecorator
from trainop_core.decorators.config import DecoratorConfig, FailurePolicy, ServerSettings
from trainop_core.decorators.guard import patched_pod
from trainop_core.decorators.review import DecorationError, Verdict, read_verdict, review_request
from trainop_core.decorators.selectors import matches, namespace_labels
from trainop_core.decorators.transport import HttpTransport, Transport
from trainop_core.kinds.base import Kind
from trainop_core.planner.conditions import failed_status
from trainop_core.planner.types import Event, Plan

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
FAILED_REASON = "FailedDecoration"
IGNORED_REASON = "DecorationIgnored"
CACHE_BYTES = 16 * 1024 * 1024  # verdicts kept, by the size of the answers they came from


class CallObserver(Protocol):
    def observe_call(self, server: str, seconds: float) -> None:
        """A call to `server` took `seconds` (answered or not). Must not block or raise."""
        ...

    def count_failure(self, server: str, reason: str) -> None:
        """`server`'s answer could not be used (a DecorationError reason). Must not block."""
        ...


@dataclass
class Decorated:
    """A plan after decoration; `failure` is set when a server's failure or refusal failed
    the job (the plan then creates nothing), `ignored` lists failures ignored by policy."""

    plan: Plan
    failure: str = ""
    ignored: list[str] = field(default_factory=list)


class Decoration:
    """The servers of one configuration, with their verdict cache. Thread-safe (the operator's
    workers share one); `decorate` does I/O."""

    def __init__(
        self,
        servers: Sequence[ServerSettings],
        *,
        transport: Transport | None = None,
        labels_of_namespace: Callable[[str], Mapping[str, str]] = namespace_labels,
        observer: CallObserver | None = None,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.servers = tuple(servers)
        self.transport = transport or HttpTransport()
        self.labels_of_namespace = labels_of_namespace
        self.observer = observer
        self.cache_bytes = cache_bytes
        self.calls = 0  # made so far (benchmarks and tests read it)
        self._cache: OrderedDict[tuple[str, str, int, str], Verdict] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def decorate(self, job: TrainingJob, kind: Kind, plan: Plan) -> Decorated:
        """`plan` with every selecting server's change applied to the pods it creates."""
        if not self.servers or not plan.create_pods:
            return Decorated(plan)
        groups = _by_replica_type(plan.create_pods, kind)
        ignored: list[str] = []
        for server in self._selecting(job):
            for rtype, pods in groups.items():
                try:
                    groups[rtype] = self._patched(server, job, kind, rtype, pods)
                except DecorationError as err:
                    message = _message(server, rtype, err)
                    if err.reason == "refused" or server.failure_policy == FailurePolicy.FAIL:
                        return Decorated(_failed(plan, job, kind, message), failure=message)
                    ignored.append(message)
        events = [Event("Warning", IGNORED_REASON, m) for m in ignored]
        pods = [pod for group in groups.values() for pod in group]
        order = {p["metadata"]["name"]: i for i, p in enumerate(plan.create_pods)}
        pods.sort(key=lambda p: order[p["metadata"]["name"]])
        return Decorated(replace(plan, create_pods=pods, events=plan.events + events), "", ignored)

    # --- selection -------------------------------------------------------------------------------
    def _selecting(self, job: TrainingJob) -> list[ServerSettings]:
        chosen = []
        for server in self.servers:
            if not server.applies_to_kind(job.kind):
                continue
            if not matches(server.object_selector, job.metadata.labels or {}):
                continue
            if server.namespace_selector is not None and not matches(
                server.namespace_selector, self.labels_of_namespace(job.namespace)
            ):
                continue
            chosen.append(server)
        return chosen

    # --- one server, one replica type ------------------------------------------------------------
    def _patched(
        self,
        server: ServerSettings,
        job: TrainingJob,
        kind: Kind,
        rtype: str,
        pods: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        verdict = self._verdict(server, job, kind, rtype, pods[0])
        if not verdict.allowed:
            raise DecorationError("refused", f"refused the job: {verdict.message}")
        if not verdict.patch:
            return pods
        try:
            return [patched_pod(pod, verdict.patch) for pod in pods]
        except DecorationError as err:
            self._count_failure(server, err.reason)
            raise

    def _verdict(
        self, server: ServerSettings, job: TrainingJob, kind: Kind, rtype: str, pod: dict[str, Any]
    ) -> Verdict:
        key = (server.name, job.metadata.uid or job.key, job.metadata.generation or 0, rtype)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        verdict = self._call(server, job, kind, rtype, pod)
        self._remember(key, verdict)
        return verdict

    def _call(
        self, server: ServerSettings, job: TrainingJob, kind: Kind, rtype: str, pod: dict[str, Any]
    ) -> Verdict:
        uid = str(uuid.uuid4())
        index = int(pod["metadata"]["labels"][REPLICA_INDEX_LABEL])
        spec = job.spec.replica_specs.get(rtype)
        replicas = (spec.replicas or 0) if spec is not None else 0
        body = review_request(uid, job.to_dict(), rtype, index, replicas, pod)
        started = time.monotonic()
        with self._lock:
            self.calls += 1
        try:
            verdict = read_verdict(self.transport.post(server, body), uid)
        except DecorationError as err:
            self._count_failure(server, err.reason)
            raise
        finally:
            if self.observer is not None:
                self.observer.observe_call(server.name, time.monotonic() - started)
        if not verdict.allowed:
            self._count_failure(server, "refused")
        return verdict

    def _remember(self, key: tuple[str, str, int, str], verdict: Verdict) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = verdict
            self._cached_bytes += verdict.size
            while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                self._cached_bytes -= dropped.size

    def _count_failure(self, server: ServerSettings, reason: str) -> None:
        if self.observer is not None:
            self.observer.count_failure(server.name, reason)


@dataclass(frozen=True)
class Decorators:
    """What one configuration gives a backend: the in-process decorators for the planner and the
    servers for its effects layer."""

    in_process: tuple[PodDecorator, ...]
    servers: Decoration

    @classmethod
    def from_config(cls, config: DecoratorConfig, **options: Any) -> Decorators:
        """Build both afresh (entry points are loaded now); `options` go to `Decoration`."""
        return cls(config.pod_decorators(), Decoration(config.servers, **options))


def _by_replica_type(pods: list[dict[str, Any]], kind: Kind) -> dict[str, list[dict[str, Any]]]:
    """The plan's pods by canonical replica type, lowest index first in each."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        groups.setdefault(kind.canonical_replica_type(labels[REPLICA_TYPE_LABEL]), []).append(pod)
    for group in groups.values():
        group.sort(key=lambda p: int(p["metadata"]["labels"][REPLICA_INDEX_LABEL]))
    return groups


def _message(server: ServerSettings, rtype: str, err: DecorationError) -> str:
    return f'decorator server "{server.name}" ({server.url}), replica type {rtype}: {err}'


def _failed(plan: Plan, job: TrainingJob, kind: Kind, message: str) -> Plan:
    """The plan without any creation, the job Failed and an event saying why."""
    current = plan.status or job.status or JobStatus()
    status = JobStatus.model_validate(
        failed_status(current.to_dict(), kind.kind, f"{message}; no pod was created", FAILED_REASON)
    )
    metrics = plan.metrics if "failed" in plan.metrics else [*plan.metrics, "failed"]
    return replace(
        plan,
        create_pods=[],
        create_services=[],
        status=status,
        events=[*plan.events, Event("Warning", FAILED_REASON, message)],
        metrics=metrics,
        requeue_after=None,
    )
