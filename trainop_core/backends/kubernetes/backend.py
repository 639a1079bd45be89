"""`TrainingClient(backend="kubernetes")`: jobs stored on a cluster, run by the trainop operator.

This backend only talks to the API server: it creates, reads, watches and deletes the job
objects and reads pod logs. Running the replicas is the operator's business (`trainop operator`;
for Kubeflow Trainer v2 TrainJobs, `--enable-scheme TrainJob`, or Trainer itself: see
`trainjobs`).
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainop_core.api import trainjob as v2
from trainop_core.api.job import TrainingJob
from trainop_core.backends.base import JobEvent, LogLine
from trainop_core.backends.kubernetes import control
from trainop_core.backends.kubernetes.config import connect
from trainop_core.backends.kubernetes.errors import ApiError
from trainop_core.backends.kubernetes.jobs import JobStore
from trainop_core.backends.kubernetes.logs import follow_logs, read_logs
from trainop_core.backends.kubernetes.pods import Pods
from trainop_core.backends.kubernetes.queue import KueueWorkloads
from trainop_core.backends.kubernetes.trainjobs import (
    TRAINJOB_KIND,
    ClusterRuntimes,
    for_create,
    is_trainjob,
    planned_view,
    trainjob_body,
)
from trainop_core.backends.kubernetes.wait import wait_finished
from trainop_core.errors import (
    InvalidJobError,
    JobTimeoutError,
    NotFoundError,
    Problem,
    TerminalError,
)
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.planner.types import ObservedPod
from trainop_core.runtimes.catalog import RuntimeCatalog

PROPAGATIONS = ("Foreground", "Background")


# A TrainJob already planned with runtimes found elsewhere: the cluster's runtimes decide.
_PLANNED_TRAINJOB = (
    "a TrainJob planned with runtimes from elsewhere cannot be created on a cluster: pass the "
    "TrainJob itself (its YAML, a file or a dict) so that it is checked against the cluster's "
    "runtimes and stored as written"
)


class AmbiguousJobError(TerminalError):
    """Jobs of two kinds share one namespace/name; this backend cannot tell which one is meant."""


class KubernetesBackend:
    """The Backend protocol (trainop_core.backends.base) over the Kubernetes API.

    Options: `kubeconfig` (path) and `context`, or `in_cluster` (None: decide from the
    environment); `namespace` overrides the context's default namespace; `propagation` is how
    delete removes the job's pods ("Foreground" waits for them, "Background" does not);
    `api_client` injects a ready `kubernetes.client.ApiClient`.
    """

    name = "kubernetes"

    def __init__(
        self,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
        namespace: str | None = None,
        propagation: str = "Foreground",
        delete_timeout: float = 120.0,
        api_client: Any = None,
        registry: KindRegistry | None = None,
    ) -> None:
        if propagation not in PROPAGATIONS:
            raise TerminalError(
                f"propagation: expected one of {', '.join(PROPAGATIONS)}, got {propagation!r}"
            )
        if api_client is None:
            connection = connect(
                kubeconfig=kubeconfig, context=context, in_cluster=in_cluster, namespace=namespace
            )
            api_client, namespace = connection.api_client, connection.namespace
        self.default_namespace = namespace or "default"
        self.propagation = propagation
        self.delete_timeout = delete_timeout
        self._registry = registry or build_registry()
        self._jobs = JobStore(api_client)
        self._trainjobs = JobStore(api_client, v2.GROUP, v2.VERSION)
        self._runtimes = ClusterRuntimes(api_client)
        self._pods = Pods(api_client)
        self._workloads = KueueWorkloads(api_client)
        self._kinds: dict[tuple[str, str], Kind] = {}  # namespace/name -> kind, learnt on the way

    # --- JobStore -------------------------------------------------------------------------------
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        """POST the job in its namespace (else the default one); AlreadyExistsError if taken."""
        if is_trainjob(kind):
            raise InvalidJobError([Problem("kind", _PLANNED_TRAINJOB)])
        if kind.kind not in self._registry:
            raise InvalidJobError([Problem("kind", f"{kind.kind}: not served by this backend")])
        namespace = job.metadata.namespace or self.default_namespace
        stored = self._jobs.create(kind, namespace, _body(job, kind, namespace))
        self._kinds[(namespace, job.name)] = kind
        return self._parse(kind, stored)

    # --- TrainJobStore --------------------------------------------------------------------------
    def runtime_catalog(self, namespace: str) -> RuntimeCatalog:
        """The runtimes a TrainJob in `namespace` may name on this cluster (two LISTs)."""
        return self._runtimes.catalog(namespace)

    def create_trainjob(self, trainjob: dict[str, Any], planned: TrainingJob) -> TrainingJob:
        """POST the TrainJob as written (checked already: `planned` is what its runtime makes of
        it) in `planned`'s namespace; AlreadyExistsError if the name is taken."""
        namespace = planned.metadata.namespace or self.default_namespace
        body = trainjob_body(trainjob, namespace)
        stored = self._trainjobs.create(TRAINJOB_KIND, namespace, body)
        self._kinds[(namespace, planned.name)] = TRAINJOB_KIND
        return self._parse(TRAINJOB_KIND, stored)

    def get(self, name: str, namespace: str) -> TrainingJob:
        kind, obj = self._find(name, self._ns(namespace))
        return self._parse(kind, obj)

    def list(self, namespace: str | None) -> list[TrainingJob]:
        jobs = [
            self._parse(kind, obj)
            for kind in self._registry.kinds
            for obj in self._jobs.list(kind, namespace)
        ]
        jobs += self._list_trainjobs(namespace)
        return sorted(jobs, key=lambda j: (j.namespace, j.name, j.kind))

    def delete(self, name: str, namespace: str) -> None:
        """DELETE with the configured propagation, then wait until the job object is gone
        (with Foreground propagation that is after its pods and services are gone)."""
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        self._store(kind).delete(kind, namespace, name, self.propagation)
        self._wait_gone(kind, namespace, name)
        self._kinds.pop((namespace, name), None)

    # --- JobControl -----------------------------------------------------------------------------
    def stop(self, name: str, namespace: str, reason: str) -> None:
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        store = self._store(kind)
        control.stop(store, self._pods, kind, namespace, name, reason, self.delete_timeout)

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        if is_trainjob(kind):  # Trainer's field; Kueue's TrainJob integration sets it too
            self._trainjobs.patch(kind, namespace, name, {"spec": {"suspend": suspended}})
            return
        self._jobs.patch(kind, namespace, name, {"spec": {"runPolicy": {"suspend": suspended}}})

    # --- LogSource ------------------------------------------------------------------------------
    def logs(
        self,
        name: str,
        namespace: str,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        namespace = self._ns(namespace)
        kind, obj = self._find(name, namespace)
        job = self._parse(kind, obj)
        if follow:
            return follow_logs(self._store(kind), self._pods, kind, job, replica, tail)
        return read_logs(self._pods, kind, job, replica, tail)

    # --- Inspectable ----------------------------------------------------------------------------
    def replicas(self, name: str, namespace: str) -> builtins.list[ObservedPod]:
        from trainop_core.operator.observe import observe_pod  # the operator's reading of pods

        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        observed = (observe_pod(pod, kind) for pod in self._pods.raw_of_job(kind, namespace, name))
        rank = {rtype: position for position, rtype in enumerate(kind.replica_types)}
        pods = [pod for pod in observed if pod is not None]
        return sorted(pods, key=lambda pod: (rank.get(pod.replica_type, len(rank)), pod.index))

    def events(self, name: str, namespace: str) -> builtins.list[JobEvent]:
        namespace = self._ns(namespace)
        _, obj = self._find(name, namespace)
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        events = [_job_event(item) for item in self._pods.events(namespace, uid)]
        return sorted(events, key=lambda event: event.time)

    # --- beyond the protocol ----------------------------------------------------------------------
    def wait(self, name: str, namespace: str, timeout: float | None = None) -> TrainingJob:
        """Block until the job Succeeded or Failed (a watch, resumed as needed) and return it.
        JobTimeoutError after `timeout` seconds; NotFoundError if it is missing or deleted."""
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        finished = wait_finished(self._store(kind), kind, namespace, name, timeout)
        return self._parse(kind, finished)

    def queue_reasons(self, jobs: Sequence[TrainingJob]) -> dict[str, str]:
        """Why each of `jobs` that waits in Kueue is not admitted yet, by job uid (read from
        Kueue's Workloads; empty without Kueue). See `trainop_core.backends.kubernetes.queue`."""
        return self._workloads.reasons(jobs)

    # --- helpers ----------------------------------------------------------------------------------
    def _ns(self, namespace: str | None) -> str:
        return namespace or self.default_namespace

    def _store(self, kind: Kind) -> JobStore:
        return self._trainjobs if is_trainjob(kind) else self._jobs

    def _list_trainjobs(self, namespace: str | None) -> builtins.list[TrainingJob]:
        """TrainJobs, each read with its runtime (one catalog per namespace); none where the
        cluster does not serve trainer.kubeflow.org."""
        try:
            objects = self._trainjobs.list(TRAINJOB_KIND, namespace)
        except NotFoundError:
            return []
        catalogs: dict[str, RuntimeCatalog] = {}
        jobs: builtins.list[TrainingJob] = []
        for obj in objects:
            where = (obj.get("metadata") or {}).get("namespace") or self.default_namespace
            if where not in catalogs:
                catalogs[where] = self._runtimes.catalog(where)
            jobs.append(self._parse(TRAINJOB_KIND, obj, catalogs[where]))
        return jobs

    def _find(self, name: str, namespace: str) -> tuple[Kind, dict[str, Any]]:
        """The job's kind and object: the kind learnt earlier first, else every kind (the
        kubeflow.org/v1 kinds, then TrainJob)."""
        known = self._kinds.get((namespace, name))
        if known is not None:
            try:
                return known, self._store(known).get(known, namespace, name)
            except NotFoundError:
                del self._kinds[(namespace, name)]
        found = []
        for kind in (*self._registry.kinds, TRAINJOB_KIND):
            try:
                found.append((kind, self._store(kind).get(kind, namespace, name)))
            except NotFoundError:  # no such job, or (TrainJob) no Trainer CRDs on the cluster
                continue
        if not found:
            raise NotFoundError(f"job {namespace}/{name} not found")
        if len(found) > 1:
            kinds = " and ".join(kind.kind for kind, _ in found)
            raise AmbiguousJobError(f"job {namespace}/{name}: {kinds} both have that name")
        self._kinds[(namespace, name)] = found[0][0]
        return found[0]

    def _wait_gone(self, kind: Kind, namespace: str, name: str) -> None:
        deadline = time.monotonic() + self.delete_timeout
        while True:
            try:
                self._store(kind).get(kind, namespace, name)
            except NotFoundError:
                return
            if time.monotonic() > deadline:
                raise JobTimeoutError(
                    f"{kind.kind} {namespace}/{name} still exists {self.delete_timeout:g}s "
                    "after its deletion (finalizers or dependents left?)"
                )
            time.sleep(control.POLL_SECONDS)

    def _parse(
        self, kind: Kind, obj: dict[str, Any], catalog: RuntimeCatalog | None = None
    ) -> TrainingJob:
        try:
            if is_trainjob(kind):
                namespace = (obj.get("metadata") or {}).get("namespace") or self.default_namespace
                return planned_view(obj, catalog or self._runtimes.catalog(namespace))
            return kind.job_model.model_validate(obj)
        except ValidationError as exc:
            name = (obj.get("metadata") or {}).get("name", "?")
            raise ApiError(
                f"the server returned a {kind.kind} {name} trainop cannot read: {exc}"
            ) from exc


def _body(job: TrainingJob, kind: Kind, namespace: str) -> dict[str, Any]:
    """The wire form to POST: the kind's canonical spelling, no status or server-set fields."""
    body = job.to_dict()
    body["kind"] = kind.kind
    return for_create(body, namespace)


def _job_event(item: dict[str, Any]) -> JobEvent:
    """A core/v1 Event as `kubectl describe` shows it: its last time, type, reason, message."""
    when = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp") or ""
    return JobEvent(str(when), str(item.get("type", "")), str(item.get("reason", "")),
                    str(item.get("message", "")))  # fmt: skip
