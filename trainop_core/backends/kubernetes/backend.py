"""`TrainingClient(backend="kubernetes")`: jobs stored on a cluster, run by the trainop operator.

This backend only talks to the API server: it creates, reads, watches and deletes the job
objects and reads pod logs. Running the replicas is the operator's business (`trainop operator`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainop_core.api.job import TrainingJob
from trainop_core.backends.base import LogLine
from trainop_core.backends.kubernetes import control
from trainop_core.backends.kubernetes.config import connect
from trainop_core.backends.kubernetes.errors import ApiError
from trainop_core.backends.kubernetes.jobs import JobStore
from trainop_core.backends.kubernetes.logs import follow_logs, read_logs
from trainop_core.backends.kubernetes.pods import Pods
from trainop_core.backends.kubernetes.queue import KueueWorkloads
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

PROPAGATIONS = ("Foreground", "Background")
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


# A TrainJob (Kubeflow Trainer v2) is not a kubeflow.org/v1 resource this backend can POST.
_NOT_SERVED = (
    "{kind} is not a kubeflow.org/v1 kind this backend creates: create a TrainJob on a cluster "
    "with kubectl or the Kubeflow SDK (TrainerClient), for an operator run with "
    "--enable-scheme TrainJob"
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
        self._pods = Pods(api_client)
        self._workloads = KueueWorkloads(api_client)
        self._kinds: dict[tuple[str, str], Kind] = {}  # namespace/name -> kind, learnt on the way

    # --- JobStore -------------------------------------------------------------------------------
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        """POST the job in its namespace (else the default one); AlreadyExistsError if taken."""
        if kind.kind not in self._registry:
            raise InvalidJobError([Problem("kind", _NOT_SERVED.format(kind=kind.kind))])
        namespace = job.metadata.namespace or self.default_namespace
        stored = self._jobs.create(kind, namespace, _body(job, kind, namespace))
        self._kinds[(namespace, job.name)] = kind
        return self._parse(kind, stored)

    def get(self, name: str, namespace: str) -> TrainingJob:
        kind, obj = self._find(name, self._ns(namespace))
        return self._parse(kind, obj)

    def list(self, namespace: str | None) -> list[TrainingJob]:
        jobs = [
            self._parse(kind, obj)
            for kind in self._registry.kinds
            for obj in self._jobs.list(kind, namespace)
        ]
        return sorted(jobs, key=lambda j: (j.namespace, j.name, j.kind))

    def delete(self, name: str, namespace: str) -> None:
        """DELETE with the configured propagation, then wait until the job object is gone
        (with Foreground propagation that is after its pods and services are gone)."""
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        self._jobs.delete(kind, namespace, name, self.propagation)
        self._wait_gone(kind, namespace, name)
        self._kinds.pop((namespace, name), None)

    # --- JobControl -----------------------------------------------------------------------------
    def stop(self, name: str, namespace: str, reason: str) -> None:
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        control.stop(self._jobs, self._pods, kind, namespace, name, reason, self.delete_timeout)

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        self._jobs.patch(kind, namespace, name, {"spec": {"runPolicy": {"suspend": suspended}}})

    # --- LogSource ------------------------------------------------------------------------------
    def logs(
        self, name: str, namespace: str, replica: str | None = None, follow: bool = False
    ) -> Iterator[LogLine]:
        namespace = self._ns(namespace)
        kind, obj = self._find(name, namespace)
        job = self._parse(kind, obj)
        if follow:
            return follow_logs(self._jobs, self._pods, kind, job, replica)
        return read_logs(self._pods, kind, job, replica)

    # --- beyond the protocol ----------------------------------------------------------------------
    def wait(self, name: str, namespace: str, timeout: float | None = None) -> TrainingJob:
        """Block until the job Succeeded or Failed (a watch, resumed as needed) and return it.
        JobTimeoutError after `timeout` seconds; NotFoundError if it is missing or deleted."""
        namespace = self._ns(namespace)
        kind, _ = self._find(name, namespace)
        return self._parse(kind, wait_finished(self._jobs, kind, namespace, name, timeout))

    def queue_reasons(self, jobs: Sequence[TrainingJob]) -> dict[str, str]:
        """Why each of `jobs` that waits in Kueue is not admitted yet, by job uid (read from
        Kueue's Workloads; empty without Kueue). See `trainop_core.backends.kubernetes.queue`."""
        return self._workloads.reasons(jobs)

    # --- helpers ----------------------------------------------------------------------------------
    def _ns(self, namespace: str | None) -> str:
        return namespace or self.default_namespace

    def _find(self, name: str, namespace: str) -> tuple[Kind, dict[str, Any]]:
        """The job's kind and object: the kind learnt earlier first, else every kind."""
        known = self._kinds.get((namespace, name))
        if known is not None:
            try:
                return known, self._jobs.get(known, namespace, name)
            except NotFoundError:
                del self._kinds[(namespace, name)]
        found = []
        for kind in self._registry.kinds:
            try:
                found.append((kind, self._jobs.get(kind, namespace, name)))
            except NotFoundError:
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
                self._jobs.get(kind, namespace, name)
            except NotFoundError:
                return
            if time.monotonic() > deadline:
                raise JobTimeoutError(
                    f"{kind.kind} {namespace}/{name} still exists {self.delete_timeout:g}s "
                    "after its deletion (finalizers or dependents left?)"
                )
            time.sleep(control.POLL_SECONDS)

    @staticmethod
    def _parse(kind: Kind, obj: dict[str, Any]) -> TrainingJob:
        try:
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
    body.pop("status", None)
    metadata = body.setdefault("metadata", {})
    metadata["namespace"] = namespace
    for field in SERVER_FIELDS:
        metadata.pop(field, None)
    return body
