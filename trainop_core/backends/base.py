"""What a backend is: three small Protocols the `TrainingClient` drives, whatever runs the replicas.

A backend stores jobs (`JobStore`), controls running ones (`JobControl`) and serves replicas' logs
(`LogSource`). It never decides anything about a job: deciding is the planner's job; a backend
observes what runs and applies the planner's plans (on Kubernetes that is the operator's loop, on
this machine the local supervisor). Job identity is namespace/name everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import SERVER_SET, format_time, utc_now
from trainop_core.kinds.base import Kind
from trainop_core.planner.types import ObservedPod

if TYPE_CHECKING:
    from trainop_core.runtimes.catalog import RuntimeCatalog


@dataclass(frozen=True)
class LogLine:
    """One line a replica wrote (stdout and stderr share one stream), tagged with its replica.

    `replica` is `<lowercase replica type>-<index>`, e.g. "master-0"; `text` has no newline.
    """

    replica: str
    text: str


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to a job, as `kubectl describe` lists it: `time` is RFC 3339
    ("" if unknown), `type` Normal or Warning, `reason` upstream's (SuccessfulCreatePod, ...)."""

    time: str
    type: str
    reason: str
    message: str


class JobStore(Protocol):
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        """Store a defaulted, validated job and start running it; returns it as stored.

        Not idempotent: a job with the same namespace/name that still exists (running or finished)
        raises AlreadyExistsError. A job this backend cannot run raises InvalidJobError naming
        the field, and then nothing has been created. `workdir` is where relative paths in the
        job resolve (None: the job came as data and nobody chose one; the current directory);
        backends that run in containers ignore it. Does I/O.
        """
        ...

    def get(self, name: str, namespace: str) -> TrainingJob:
        """The job with its latest status. Raises NotFoundError. Read-only I/O."""
        ...

    def list(self, namespace: str | None) -> list[TrainingJob]:
        """Every job in `namespace` (None: all), sorted by namespace then name. Read-only."""
        ...

    def delete(self, name: str, namespace: str) -> None:
        """Stop every replica and remove the job with everything it owns (logs included).

        Returns once nothing of the job runs any more. Raises NotFoundError if there is no such
        job, so calling it twice is an error the second time (like `kubectl delete`).
        """
        ...


class JobControl(Protocol):
    def stop(self, name: str, namespace: str, reason: str) -> None:
        """Stop every replica of an unfinished job and record it Failed with `reason` as message.

        Idempotent: a finished job is left as it is. Returns once no replica runs. Does I/O.
        """
        ...

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        """Set `spec.runPolicy.suspend`; the planner then stops or restarts the replicas.

        Idempotent. Returns once the change is stored, not when replicas have stopped. Does I/O.
        """
        ...


class LogSource(Protocol):
    def logs(
        self,
        name: str,
        namespace: str,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        """Replicas' output lines, one replica after the other (or only `replica`).

        With `follow`, yields lines as they are written, from every replica, until the job has
        finished and everything written has been yielded. With `tail`, each replica's output
        starts at its last `tail` lines written before the call (`kubectl logs --tail`), found
        without reading the output before them. Raises NotFoundError for an unknown job
        or replica. Read-only I/O.
        """
        ...


class Backend(JobStore, JobControl, LogSource, Protocol):
    """Everything `TrainingClient` needs from a backend."""

    name: str


@runtime_checkable
class Recoverable(Protocol):
    def recover(self, name: str, namespace: str) -> bool:
        """Restart the job's controlling process if it died while the job was unfinished.

        Idempotent; returns True if something was restarted. Does I/O.
        """
        ...


@runtime_checkable
class Waiter(Protocol):
    def wait(self, name: str, namespace: str, timeout: float | None = None) -> TrainingJob:
        """Block until the job Succeeded or Failed and return it, better than polling `get`
        (e.g. a watch). JobTimeoutError after `timeout` seconds, the job left running;
        NotFoundError if it is missing or deleted meanwhile. Read-only I/O."""
        ...


@runtime_checkable
class Followable(Protocol):
    def following(self, name: str, namespace: str) -> AbstractContextManager[None]:
        """While the block runs, the backend keeps a finished job until the block ends (a TTL
        deletion waits), so that whoever waits for the job sees how it ended. Never blocks;
        nothing happens for a job that does not exist. May do I/O."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """A backend that can say what became of each replica and what happened to the job."""

    def replicas(self, name: str, namespace: str) -> list[ObservedPod]:
        """The job's replica pods (or processes) as last seen, in the kind's replica order:
        phase, restarts, exit code, reason. NotFoundError for an unknown job. Read-only I/O."""
        ...

    def events(self, name: str, namespace: str) -> list[JobEvent]:
        """The job's events, oldest first (each backend keeps a bounded number). NotFoundError
        for an unknown job. Read-only I/O."""
        ...


@runtime_checkable
class QueueInspector(Protocol):
    def queue_reasons(self, jobs: Sequence[TrainingJob]) -> dict[str, str]:
        """Why each of `jobs` that waits in a queue (Kueue, on Kubernetes) has not been admitted,
        by job uid, in the queue's own words; jobs that do not wait are left out. Read-only I/O."""
        ...


@runtime_checkable
class TrainJobStore(Protocol):
    """A backend that stores Kubeflow Trainer v2 TrainJobs as such (kubernetes), rather than the
    planned job (local, ray): the client checks a TrainJob against the backend's runtimes."""

    def runtime_catalog(self, namespace: str) -> RuntimeCatalog:
        """The training runtimes a TrainJob in `namespace` may name there. Read-only I/O."""
        ...

    def create_trainjob(self, trainjob: dict[str, Any], planned: TrainingJob) -> TrainingJob:
        """Store `trainjob` (its wire form, already checked: `planned` is what its runtime makes
        of it, in `planned`'s namespace) as written, and return it as read back. Not idempotent:
        AlreadyExistsError if the name is taken. Does I/O."""
        ...


def stamp_new(wire: dict[str, Any]) -> None:
    """Make `wire` (changed in place) a newly stored object, as the API server makes one: its
    namespace ("default" if none), a fresh uid and creation time whatever the object said (the
    output of `trainop get` applied again is a new job), no status."""
    metadata = wire.setdefault("metadata", {})
    for field in SERVER_SET:
        metadata.pop(field, None)
    metadata.setdefault("namespace", "default")
    metadata["uid"] = os.urandom(16).hex()
    metadata["creationTimestamp"] = format_time(utc_now())
    wire.pop("status", None)
