"""The local backend (the default): every replica is a real process on this machine.

`create` writes the job's state directory and starts a detached supervisor process that runs the
job (see `supervisor`); every other call only reads or writes the state directory, so any shell
sees the same jobs, status and logs. The job outlives the Python process that created it.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainop_core.api.bounds import total_replicas
from trainop_core.api.job import GROUP, JobSpec, TrainingJob
from trainop_core.api.types import ObjectMeta
from trainop_core.backends.base import JobEvent, LogLine, stamp_new
from trainop_core.backends.local.addressing import allocate_ports
from trainop_core.backends.local.leases import Leases, hold_shared
from trainop_core.backends.local.limits import replica_limit_problems
from trainop_core.backends.local.logs import follow_logs, read_logs, replica_order
from trainop_core.backends.local.procs import JOB_MARKER, kill_marked, kill_session
from trainop_core.backends.local.queue import QUEUED, admit, queue_record
from trainop_core.backends.local.queue import read_state as queue_state
from trainop_core.backends.local.queueing import job_requests
from trainop_core.backends.local.spawn import spawn_supervisor
from trainop_core.backends.local.state import (
    JobDir,
    StateRoot,
    flocked,
    read_json,
    remove_tree,
    write_json_atomic,
)
from trainop_core.backends.local.status import failed_status, is_finished
from trainop_core.backends.process.podspec import LOCAL_RUNS_ON, job_warnings, runnable_problems
from trainop_core.decorators.config import DecoratorConfig, load_decorator_config
from trainop_core.errors import (
    AlreadyExistsError,
    DamagedJobError,
    InvalidJobError,
    StateError,
    TrainopError,
)
from trainop_core.kinds.base import Kind
from trainop_core.planner.types import ObservedPod
from trainop_core.private_files import write_new
from trainop_core.replicas import replica_id, replica_ids

log = logging.getLogger("trainop")

SUPERVISOR_ANNOTATION = "local.trainop.dev/supervisor"  # "lost" when its supervisor died
DAMAGED_ANNOTATION = "local.trainop.dev/damaged"  # what is wrong with a job's stored state
QUEUE_STATE_ANNOTATION = "local.trainop.dev/queue-state"  # "Queued" while the local queue holds it
QUEUE_MESSAGE_ANNOTATION = "local.trainop.dev/queue-message"  # ... and why
STOP_TIMEOUT_SECONDS = 60.0


class LocalBackend:
    """Jobs as process trees on this machine, state under `home` (default `$TRAINOP_HOME` or
    `~/.trainop`). `decorators`: the decorator configuration (a file or a model; default
    `$TRAINOP_DECORATORS`, else the installed plugins); each job keeps the one it was created
    with, so a restarted supervisor decorates its pods the same way."""

    name = "local"

    def __init__(
        self,
        home: str | Path | None = None,
        decorators: DecoratorConfig | str | Path | None = None,
    ) -> None:
        self.root = StateRoot(Path(home).expanduser() if home is not None else None)
        self._leases = Leases()  # creators' holds on their jobs' state (see `leases`)
        self.decorators = load_decorator_config(decorators)

    # --- JobStore -------------------------------------------------------------------------------
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        with self._state_errors(f"create job {job.key}"):
            wire = job.to_dict()
            specs = wire["spec"].get(kind.replica_field, {})
            problems = replica_limit_problems(total_replicas(job), kind.replica_field)
            idle = [rtype for rtype, _ in kind.idle_commands]
            problems = problems or runnable_problems(
                specs, kind.replica_field, kind.default_container, idle_types=idle
            )
            if problems:  # before anything is allocated, locked or written
                raise InvalidJobError(problems, job=f"{job.kind}/{job.name}")
            queued = self._queue_record(job)
            where = Path(workdir or os.getcwd()).resolve()
            job_dir, created = self._materialise(job, kind, wire, where, queued)
            for message in job_warnings(job, specs, kind, LOCAL_RUNS_ON):
                job_dir.append_event("Warning", "LocalBackend", message)
                log.warning("%s %s: %s", job.kind, job.key, message)
            self._leases.take(job_dir)  # until this process follows the job (or briefly)
            try:
                spawn_supervisor(job_dir, new_job=True)
            except BaseException:
                self._leases.release(job_dir)
                remove_tree(job_dir.path)
                raise
            return created

    def get(self, name: str, namespace: str) -> TrainingJob:
        with self._state_errors(f"read job {namespace}/{name}"):
            return self._read(self.root.existing(name, namespace))

    def list(self, namespace: str | None) -> list[TrainingJob]:
        jobs = []
        with self._state_errors("list jobs"):
            for job_dir in self.root.all_jobs(namespace):
                with contextlib.suppress(FileNotFoundError):  # deleted meanwhile: not listed
                    jobs.append(self._read(job_dir))
        return jobs

    def delete(self, name: str, namespace: str) -> None:
        with self._state_errors(f"delete job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            job_dir.check_removable()  # before anything is stopped: all of it, or nothing
            queued = _is_queued(job_dir)
            self._leases.release(job_dir)
            self._stop_supervisor(job_dir, {"delete": True, "reason": "deleted"})
            kill_recorded_replicas(job_dir)
            remove_tree(job_dir.path, strict=True)
            if queued:  # its place or its quota is free: admit whoever comes next
                self._admit_next()

    # --- JobControl -----------------------------------------------------------------------------
    def stop(self, name: str, namespace: str, reason: str) -> None:
        with self._state_errors(f"stop job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            if is_finished(job_dir.read_job().get("status") or {}):
                return
            self._stop_supervisor(job_dir, {"reason": reason})
            kill_recorded_replicas(job_dir)
            data = job_dir.read_job()  # the supervisor records it; do it here if it had died
            status = data.get("status") or {}
            if not is_finished(status):
                failed = failed_status(status, data["kind"], reason)
                job_dir.modify_job(lambda job: job.update(status=failed))

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        with self._state_errors(f"change job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            job_dir.modify_job(lambda job: _set_suspend(job, suspended))
            if not self.recover(name, namespace):
                signal_supervisor(job_dir, signal.SIGUSR1)

    # --- LogSource ------------------------------------------------------------------------------
    def logs(
        self,
        name: str,
        namespace: str,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        with self._state_errors(f"read the logs of job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            replicas = replica_order(job_dir, replica)
            if follow:
                hold = self._handover(job_dir)
                return self._guarded(follow_logs(job_dir, replicas, hold, tail))
            return self._guarded(read_logs(job_dir, replicas, tail))

    # --- Inspectable ----------------------------------------------------------------------------
    def replicas(self, name: str, namespace: str) -> builtins.list[ObservedPod]:
        with self._state_errors(f"read the replicas of job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            return observed_replicas(job_dir, replica_order(job_dir))

    def events(self, name: str, namespace: str) -> builtins.list[JobEvent]:
        with self._state_errors(f"read the events of job {namespace}/{name}"):
            records = self.root.existing(name, namespace).read_events()
        keys = ("time", "type", "reason", "message")
        return [JobEvent(*(str(record.get(key, "")) for key in keys)) for record in records]

    # --- Followable -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def following(self, name: str, namespace: str) -> Iterator[None]:
        """While the block runs, the finished job is not deleted by its TTL: whoever waits for
        it sees how it ended (`trainop run` of a job with ttlSecondsAfterFinished: 0)."""
        job_dir = self.root.job_dir(name, namespace)
        with hold_shared(job_dir.follow_lease):
            self._leases.release(job_dir)  # the creator's own hold is no longer needed
            yield

    # --- Recoverable ----------------------------------------------------------------------------
    def recover(self, name: str, namespace: str) -> bool:
        with self._state_errors(f"restart the supervisor of job {namespace}/{name}"):
            job_dir = self.root.existing(name, namespace)
            try:
                finished = is_finished(job_dir.read_job().get("status") or {})
            except DamagedJobError:
                return False  # a supervisor could not read it either
            if finished or job_dir.supervisor_alive():
                return False
            return spawn_supervisor(job_dir)

    # --- internals ------------------------------------------------------------------------------
    def _read(self, job_dir: JobDir) -> TrainingJob:
        from trainop_core.api.load import default_registry

        try:
            data = job_dir.read_job()
            job = default_registry().get(data["kind"]).job_model.model_validate(data)
        except DamagedJobError as err:
            return damaged_job(job_dir, str(err))
        except (TrainopError, LookupError, ValueError) as err:  # unknown kind, invalid spec
            return damaged_job(job_dir, str(job_dir.damaged(f"job.json: {_first_line(err)}")))
        if is_finished(data.get("status") or {}):
            return job
        annotations = dict(job.metadata.annotations or {})
        if not job_dir.supervisor_alive():
            annotations[SUPERVISOR_ANNOTATION] = "lost"
        queued = queue_state(job_dir)
        if queued.get("state") == QUEUED:  # what the queue last said: why it waits
            annotations[QUEUE_STATE_ANNOTATION] = QUEUED
            annotations[QUEUE_MESSAGE_ANNOTATION] = str(queued.get("message", ""))[:1000]
        if annotations:
            job.metadata.annotations = annotations
        return job

    def _admit_next(self) -> None:
        """An admission step after a deletion; the deletion is done whatever happens here (a
        waiting supervisor's recheck runs the step again)."""
        try:
            admit(self.root, spawn=spawn_supervisor)
        except (OSError, TrainopError) as exc:
            log.warning("the local queue's admission step failed after the deletion: %s", exc)

    def _queue_record(self, job: TrainingJob) -> dict[str, Any] | None:
        """The job's place in the local queue (None: it carries no queue label); InvalidJobError
        for a bad queue name or priority class, before anything is written."""
        policy = job.spec.run_policy.scheduling_policy
        return queue_record(
            job.metadata.labels,
            policy.priority_class if policy is not None else None,
            lambda: job_requests(
                (spec.replicas or 0, spec.template) for spec in job.spec.replica_specs.values()
            ),
            self.root,
        )

    def _materialise(
        self,
        job: TrainingJob,
        kind: Kind,
        wire: dict[str, Any],
        workdir: Path,
        queued: dict[str, Any] | None,
    ) -> tuple[JobDir, TrainingJob]:
        """Write the whole job directory aside, then rename it into place (atomic, and failing
        if the name is taken): nothing is ever half-created. Returns it and the job as stored."""
        final = self.root.job_dir(job.name, job.namespace)
        space = self.root.namespace_dir(job.namespace)
        with flocked(self.root.ports_lock):
            ports = allocate_ports(self.root, replica_ids(job, kind))
            tmp = JobDir(Path(tempfile.mkdtemp(prefix=f".{job.name}.", dir=space)))
            try:
                local = {
                    "workdir": str(workdir),
                    "ports": ports,
                    "decorators": self.decorators.to_dict(),
                }
                if queued is not None:
                    local["queue"] = queued
                _write_new_job(tmp, wire, local)
                stored = kind.job_model.model_validate(wire)
                os.rename(tmp.path, final.path)
            except OSError as exc:
                remove_tree(tmp.path)
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise AlreadyExistsError(
                        f'{kind.singular}.{GROUP} "{job.name}" already exists in '
                        f"namespace {job.namespace} (delete it first: trainop delete {job.name} "
                        f"-n {job.namespace})"
                    ) from None
                raise
            except BaseException:
                remove_tree(tmp.path)
                raise
        return final, stored

    def _handover(self, job_dir: JobDir) -> Any:
        """What a log follower holds while the job runs: the follow lease, which also ends the
        creator's hold."""

        @contextlib.contextmanager
        def hold() -> Iterator[None]:
            with hold_shared(job_dir.follow_lease):
                self._leases.release(job_dir)
                yield

        return hold

    def _guarded(self, lines: Iterator[LogLine]) -> Iterator[LogLine]:
        with self._state_errors("read logs"):
            yield from lines

    @contextlib.contextmanager
    def _state_errors(self, doing: str) -> Iterator[None]:
        """An OSError on the state directory (read-only, full, no permission) becomes a
        StateError that says what could not be done, where and why."""
        try:
            yield
        except OSError as exc:
            where = exc.filename or self.root.home
            raise StateError(
                f"cannot {doing}: {exc.strerror or exc} ({where}; TRAINOP_HOME is {self.root.home})"
            ) from None

    def _stop_supervisor(self, job_dir: JobDir, request: dict[str, Any]) -> None:
        """Ask the supervisor to stop every replica and wait until it (and its watcher, which
        kills whatever the replicas left) has exited. The request file alone is enough: the pid
        only makes it prompt."""
        if not job_dir.supervisor_alive():
            return
        write_json_atomic(job_dir.control_file, request)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        signalled = killed = False
        while job_dir.supervisor_alive():
            signalled = signalled or signal_supervisor(job_dir, signal.SIGTERM)
            if time.monotonic() > deadline:
                if killed:
                    break
                killed = signal_supervisor(job_dir, signal.SIGKILL)  # the watcher then cleans up
                deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
            time.sleep(0.02)


def damaged_job(job_dir: JobDir, message: str) -> TrainingJob:
    """A stand-in for a job whose state cannot be read: its name, namespace and what is wrong
    (annotation `local.trainop.dev/damaged`), so listings show it and `delete` can remove it."""
    namespace, name = job_dir.key.split("/", 1)
    kind = ""
    with contextlib.suppress(Exception):
        raw = read_json(job_dir.job_file)
        kind = raw["kind"] if isinstance(raw, dict) and isinstance(raw.get("kind"), str) else ""
    meta = ObjectMeta(name=name, namespace=namespace, annotations={DAMAGED_ANNOTATION: message})
    return TrainingJob(kind=kind[:63], metadata=meta, spec=JobSpec(replica_specs={}))


def _is_queued(job_dir: JobDir) -> bool:
    try:
        local = read_json(job_dir.local_file)
    except (OSError, ValueError):
        return False
    return isinstance(local, dict) and local.get("queue") is not None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def _set_suspend(job: dict[str, Any], suspended: bool) -> None:
    job["spec"].setdefault("runPolicy", {})["suspend"] = suspended


def _write_new_job(job_dir: JobDir, wire: dict[str, Any], local: dict[str, Any]) -> None:
    stamp_new(wire)
    write_json_atomic(job_dir.job_file, wire)
    write_json_atomic(job_dir.local_file, local)
    job_dir.logs_dir.mkdir(mode=0o700)
    for path in (
        job_dir.events_file,
        job_dir.create_lease,
        job_dir.follow_lease,
        *(job_dir.log_file(replica) for replica in local["ports"]),  # followers open them early
    ):
        write_new(path, "")  # in a directory made a moment ago: nothing can be there


def signal_supervisor(job_dir: JobDir, sig: int) -> bool:
    """Signal the live supervisor; False if its pid is not known (yet) or it is gone."""
    pid = job_dir.read_supervisor_pid()
    if pid is None or not job_dir.supervisor_alive():
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
        return True
    return False


def observed_replicas(job_dir: JobDir, order: list[str]) -> list[ObservedPod]:
    """The replicas the job's supervisor recorded (pods.json), in `order` (replica ids); a
    garbled record is left out, a missing or unreadable file means none started yet."""
    from trainop_core.backends.process.kubelet import LocalPod

    try:
        records = read_json(job_dir.pods_file)
    except (OSError, ValueError):
        records = []
    pods = []
    for record in records if isinstance(records, list) else []:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            pods.append(LocalPod.from_record(record, job_dir.logs_dir).observed())
    rank = {replica: position for position, replica in enumerate(order)}
    return sorted(pods, key=lambda pod: rank.get(replica_id(pod.replica_type, pod.index), 0))


def kill_recorded_replicas(job_dir: JobDir) -> None:
    """Kill whatever is left of the job's replicas when no supervisor runs it: the sessions a
    dead supervisor recorded (each replica ran in a session of its own, named by its pid), then
    every process carrying the job's marker (the record may be damaged, or a replica's child
    may have left its session)."""
    try:
        records = read_json(job_dir.pods_file)
    except (OSError, ValueError):
        records = []
    for record in records if isinstance(records, list) else []:
        pid = record.get("pid") if isinstance(record, dict) else None
        started = record.get("started") if isinstance(record, dict) else None
        if isinstance(pid, int) and pid > 1 and isinstance(started, int):  # pid reuse guarded
            kill_session(pid, started)
    kill_marked(JOB_MARKER, str(job_dir.path))
