"""The local backend (the default): every replica is a real process on this machine.

`create` writes the job's state directory and starts a detached supervisor process that runs the
job (see `supervisor`); every other call only reads or writes the state directory, so any shell
sees the same jobs, status and logs. The job outlives the Python process that created it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainop_core.api.job import GROUP, TrainingJob
from trainop_core.api.types import format_time, utc_now
from trainop_core.backends.base import LogLine
from trainop_core.backends.local.addressing import allocate_ports
from trainop_core.backends.local.logs import follow_logs, read_logs, replica_order
from trainop_core.backends.local.spawn import spawn_supervisor
from trainop_core.backends.local.state import (
    JobDir,
    StateRoot,
    flocked,
    read_json,
    write_json_atomic,
)
from trainop_core.backends.local.status import failed_status, is_finished
from trainop_core.backends.process.kubelet import kill_session
from trainop_core.backends.process.podspec import local_warnings, runnable_problems
from trainop_core.errors import AlreadyExistsError, InvalidJobError, TrainopError
from trainop_core.kinds.base import Kind
from trainop_core.replicas import replica_ids

log = logging.getLogger("trainop")

SUPERVISOR_ANNOTATION = "local.trainop.dev/supervisor"  # "lost" when its supervisor died
STOP_TIMEOUT_SECONDS = 60.0


class LocalBackend:
    """Jobs as process trees on this machine, state under `home` (default `$TRAINOP_HOME` or
    `~/.trainop`)."""

    name = "local"

    def __init__(self, home: str | Path | None = None) -> None:
        self.root = StateRoot(Path(home).expanduser() if home is not None else None)

    # --- JobStore -------------------------------------------------------------------------------
    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        wire = job.to_dict()
        specs = wire["spec"].get(kind.replica_field, {})
        problems = runnable_problems(specs, kind.replica_field, kind.default_container)
        if problems:
            raise InvalidJobError(problems, job=f"{job.kind}/{job.name}")
        job_dir = self._materialise(job, kind, wire, Path(workdir or os.getcwd()).resolve())
        warnings = local_warnings(specs, kind.replica_field, kind.default_container)
        for message in warnings:
            job_dir.append_event("Warning", "LocalBackend", message)
            log.warning("%s %s: %s", job.kind, job.key, message)
        try:
            spawn_supervisor(job_dir, new_job=True)
        except BaseException:
            shutil.rmtree(job_dir.path, ignore_errors=True)
            raise
        return self._read(job_dir)

    def get(self, name: str, namespace: str) -> TrainingJob:
        return self._read(self.root.existing(name, namespace))

    def list(self, namespace: str | None) -> list[TrainingJob]:
        jobs = []
        for job_dir in self.root.all_jobs(namespace):
            with contextlib.suppress(TrainopError, OSError, ValueError):
                jobs.append(self._read(job_dir))  # a job deleted meanwhile is simply not listed
        return jobs

    def delete(self, name: str, namespace: str) -> None:
        job_dir = self.root.existing(name, namespace)
        self._stop_supervisor(job_dir, {"delete": True, "reason": "deleted"})
        kill_recorded_replicas(job_dir)
        shutil.rmtree(job_dir.path, ignore_errors=True)

    # --- JobControl -----------------------------------------------------------------------------
    def stop(self, name: str, namespace: str, reason: str) -> None:
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
        job_dir = self.root.existing(name, namespace)
        job_dir.modify_job(lambda job: _set_suspend(job, suspended))
        if not self.recover(name, namespace):
            signal_supervisor(job_dir, signal.SIGUSR1)

    # --- LogSource ------------------------------------------------------------------------------
    def logs(
        self, name: str, namespace: str, replica: str | None = None, follow: bool = False
    ) -> Iterator[LogLine]:
        job_dir = self.root.existing(name, namespace)
        replicas = replica_order(job_dir, replica)
        return follow_logs(job_dir, replicas) if follow else read_logs(job_dir, replicas)

    # --- Recoverable ----------------------------------------------------------------------------
    def recover(self, name: str, namespace: str) -> bool:
        job_dir = self.root.existing(name, namespace)
        if is_finished(job_dir.read_job().get("status") or {}) or job_dir.supervisor_alive():
            return False
        return spawn_supervisor(job_dir)

    # --- internals ------------------------------------------------------------------------------
    def _read(self, job_dir: JobDir) -> TrainingJob:
        from trainop_core.api.load import default_registry

        data = job_dir.read_job()
        job = default_registry().get(data["kind"]).job_model.model_validate(data)
        if not is_finished(data.get("status") or {}) and not job_dir.supervisor_alive():
            annotations = dict(job.metadata.annotations or {})
            annotations[SUPERVISOR_ANNOTATION] = "lost"
            job.metadata.annotations = annotations
        return job

    def _materialise(
        self, job: TrainingJob, kind: Kind, wire: dict[str, Any], workdir: Path
    ) -> JobDir:
        """Write the whole job directory aside, then rename it into place (atomic, and failing
        if the name is taken): nothing is ever half-created."""
        final = self.root.job_dir(job.name, job.namespace)
        final.path.parent.mkdir(parents=True, exist_ok=True)
        with flocked(self.root.ports_lock):
            ports = allocate_ports(self.root, replica_ids(job, kind))
            tmp = JobDir(Path(tempfile.mkdtemp(prefix=f".{job.name}.", dir=final.path.parent)))
            try:
                _write_new_job(tmp, wire, {"workdir": str(workdir), "ports": ports})
                os.rename(tmp.path, final.path)
            except OSError as exc:
                shutil.rmtree(tmp.path, ignore_errors=True)
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise AlreadyExistsError(
                        f'{kind.singular}.{GROUP} "{job.name}" already exists in '
                        f"namespace {job.namespace} (delete it first: trainop delete {job.name} "
                        f"-n {job.namespace})"
                    ) from None
                raise
        return final

    def _stop_supervisor(self, job_dir: JobDir, request: dict[str, Any]) -> None:
        """Ask the supervisor to stop every replica and wait until it has exited."""
        if not job_dir.supervisor_alive():
            return
        write_json_atomic(job_dir.control_file, request)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        signalled = False
        while job_dir.supervisor_alive():
            signalled = signalled or signal_supervisor(job_dir, signal.SIGTERM)
            if time.monotonic() > deadline:
                signal_supervisor(job_dir, signal.SIGKILL)
                break
            time.sleep(0.02)


def _set_suspend(job: dict[str, Any], suspended: bool) -> None:
    job["spec"].setdefault("runPolicy", {})["suspend"] = suspended


def _write_new_job(job_dir: JobDir, wire: dict[str, Any], local: dict[str, Any]) -> None:
    metadata = wire.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    metadata.setdefault("uid", os.urandom(16).hex())
    metadata.setdefault("creationTimestamp", format_time(utc_now()))
    wire.pop("status", None)
    write_json_atomic(job_dir.job_file, wire)
    write_json_atomic(job_dir.local_file, local)
    job_dir.logs_dir.mkdir()
    job_dir.events_file.touch()


def signal_supervisor(job_dir: JobDir, sig: int) -> bool:
    """Signal the live supervisor; False if its pid is not known (yet) or it is gone."""
    pid = job_dir.read_supervisor_pid()
    if pid is None or not job_dir.supervisor_alive():
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
        return True
    return False


def kill_recorded_replicas(job_dir: JobDir) -> None:
    """Kill whatever is left of the replicas a dead supervisor recorded (each ran in a session of
    its own, named by its pid)."""
    try:
        records = read_json(job_dir.pods_file)
    except (OSError, ValueError):
        return
    for record in records:
        if record.get("pid"):
            kill_session(record["pid"], record.get("started"))
