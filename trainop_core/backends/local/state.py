"""The local backend's state directory: one directory per job, readable from any shell.

Layout under `$TRAINOP_HOME` (default `~/.trainop`)::

    ports.lock                        held while allocating ports (no two jobs share one)
    jobs/<namespace>/<name>/
        job.json                      the job (spec + status), written atomically
        local.json                    backend data: working directory, replica ports
        pods.json                     the supervisor's record of its replicas (pids, exit codes)
        events.jsonl                  events, one JSON object a line
        logs/<replica>.log            each replica's stdout+stderr, appended across restarts
        supervisor.lock / .pid / .log one supervisor per job (fcntl lock), its pid and output
        control.json                  a stop request for the supervisor

Writers: the creator writes everything once (into a temporary directory renamed into place, so a
job directory is never half-made); afterwards the supervisor alone writes status, pods and events,
and clients change the spec only under `job.lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.api.types import format_time, utc_now
from trainop_core.errors import NotFoundError

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def trainop_home() -> Path:
    """`$TRAINOP_HOME`, else `~/.trainop`. Nothing is created here."""
    configured = os.environ.get("TRAINOP_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".trainop"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old or the new file, never a partial one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    with path.open() as handle:
        return json.load(handle)


@contextlib.contextmanager
def flocked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an fcntl lock on `path` (created if needed) for the block."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class JobDir:
    """Paths of one job's directory. Pure: constructing it touches nothing."""

    path: Path

    @property
    def job_file(self) -> Path:
        return self.path / "job.json"

    @property
    def job_lock(self) -> Path:
        return self.path / "job.lock"

    @property
    def local_file(self) -> Path:
        return self.path / "local.json"

    @property
    def pods_file(self) -> Path:
        return self.path / "pods.json"

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def supervisor_lock(self) -> Path:
        return self.path / "supervisor.lock"

    @property
    def supervisor_pid(self) -> Path:
        return self.path / "supervisor.pid"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def control_file(self) -> Path:
        return self.path / "control.json"

    def log_file(self, replica: str) -> Path:
        return self.logs_dir / f"{replica}.log"

    def exists(self) -> bool:
        return self.job_file.is_file()

    # --- job.json -----------------------------------------------------------------------------
    def read_job(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = read_json(self.job_file)
        except FileNotFoundError as exc:
            raise NotFoundError(f"job {self.key} not found") from exc
        return data

    def modify_job(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read job.json, let `change` edit it in place, write it back; all under `job.lock`
        (the supervisor writes status while a client may write the spec)."""
        with flocked(self.job_lock):
            data = self.read_job()
            change(data)
            write_json_atomic(self.job_file, data)
        return data

    @property
    def key(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    # --- events -------------------------------------------------------------------------------
    def append_event(self, type_: str, reason: str, message: str) -> None:
        record = {"time": format_time(utc_now()), "type": type_, "reason": reason}
        record["message"] = message
        with self.events_file.open("a") as handle:
            handle.write(json.dumps(record) + "\n")

    def read_events(self) -> list[dict[str, str]]:
        try:
            lines = self.events_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    # --- supervisor liveness ------------------------------------------------------------------
    def supervisor_alive(self) -> bool:
        """True while a supervisor holds the lock (a dead process holds no fcntl lock)."""
        try:
            handle = self.supervisor_lock.open("a")
        except FileNotFoundError:
            return False
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    def read_supervisor_pid(self) -> int | None:
        try:
            return int(self.supervisor_pid.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


class StateRoot:
    """The `$TRAINOP_HOME` tree: where each namespace/name lives and which jobs exist."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home if home is not None else trainop_home()

    @property
    def jobs_root(self) -> Path:
        return self.home / "jobs"

    @property
    def ports_lock(self) -> Path:
        return self.home / "ports.lock"

    def job_dir(self, name: str, namespace: str) -> JobDir:
        """The directory of namespace/name; names that cannot be job names are never found."""
        if not (_NAME.match(name or "") and _NAME.match(namespace or "")):
            raise NotFoundError(f"job {namespace}/{name} not found (not a valid name)")
        return JobDir(self.jobs_root / namespace / name)

    def existing(self, name: str, namespace: str) -> JobDir:
        job_dir = self.job_dir(name, namespace)
        if not job_dir.exists():
            raise NotFoundError(f"job {namespace}/{name} not found")
        return job_dir

    def all_jobs(self, namespace: str | None = None) -> list[JobDir]:
        """Every job directory (of one namespace or all), sorted by namespace then name."""
        if not self.jobs_root.is_dir():
            return []
        spaces = [self.jobs_root / namespace] if namespace else sorted(self.jobs_root.iterdir())
        found: list[JobDir] = []
        for space in spaces:
            if space.is_dir():
                entries = sorted(space.iterdir())
                found.extend(JobDir(p) for p in entries if not p.name.startswith("."))
        return [job for job in found if job.exists()]
