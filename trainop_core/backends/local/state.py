"""The local backend's state directory: one directory per job, readable from any shell.

Layout under `$TRAINOP_HOME` (default `~/.trainop`)::

    ports.lock                        held while allocating ports (no two jobs share one)
    jobs/<namespace>/<name>/
        job.json                      the job (spec + status), written atomically
        local.json                    backend data: working directory, replica ports
        pods.json                     the supervisor's record of its replicas (pids, exit codes)
        events.jsonl                  events, one JSON object a line (the newest EVENTS_MAX_BYTES)
        logs/<replica>.log            each replica's stdout+stderr, appended across restarts
        supervisor.lock / .pid / .log one supervisor per job (fcntl lock), its pid and output
        control.json                  a stop request for the supervisor
        create.lease / follow.lease   held while someone follows the job (see `leases`)

Writers: the creator writes everything once (into a temporary directory renamed into place, so a
job directory is never half-made); afterwards the supervisor alone writes status, pods and events,
and clients change the spec only under `job.lock`.

Private: directories are 0700 and files 0600 (job names, specs and logs are the user's business),
created through `trainop_core.private_files` (exclusively, never through a link).
Damage stays with its job: a file that cannot be read raises `DamagedJobError` naming it, whatever
its shape (truncated, binary, huge, nested thousands deep, of the wrong types): every state file is
read within `MAX_STATE_BYTES` and the bounds of a job source (`api.reader.check_tree`). Names that
cannot be job names never become paths (`trainop_core.api.names`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainop_core.api.names import is_job_name, is_namespace, is_replica
from trainop_core.api.reader import check_tree
from trainop_core.api.types import format_time, utc_now
from trainop_core.errors import DamagedJobError, InvalidJobError, NotFoundError
from trainop_core.private_files import DIR_MODE, open_append, read_state_bytes, replace

from .leases import is_held

# A stored job is a job source (at most 3 MiB) plus its status, written indented: a file many
# times larger was not written by trainop, and is not read whole.
MAX_STATE_BYTES = 16 * 1024 * 1024
EVENTS_MAX_BYTES = 1024 * 1024  # events.jsonl keeps the newest events within this
EVENTS_KEEP_BYTES = EVENTS_MAX_BYTES // 2  # what a trim keeps, so trims are rare
MAX_EVENT_MESSAGE = 8 * 1024  # characters of one event's message (a traceback fits)


def trainop_home() -> Path:
    """`$TRAINOP_HOME`, else `~/.trainop`. Nothing is created here."""
    configured = os.environ.get("TRAINOP_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".trainop"


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can list (made, or tightened if it exists)."""
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path)) from None
        if path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(DIR_MODE)
    return path


def open_private(path: Path, mode: str = "ab") -> IO[Any]:
    """Open (creating it 0600 if needed, never through a link) a file for appending; `mode` is
    "ab" or "a"."""
    return open_append(path, mode)


def write_private(path: Path, text: str) -> None:
    """Replace a small file's content atomically (a new 0600 file renamed over it)."""
    replace(path, text)


def remove_tree(path: Path, *, strict: bool = False) -> None:
    """Remove a job directory atomically for readers: renamed aside (hidden) first, so nobody
    ever sees it half-removed, then deleted. `strict`: an OSError if anything of it is left
    (a read-only or foreign directory), naming the first path that could not be removed."""
    aside = path.with_name(f".{path.name}.removed-{os.urandom(4).hex()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    except OSError:
        aside = path  # cannot rename (e.g. a read-only parent): remove in place
    shutil.rmtree(aside, ignore_errors=True)
    if strict and os.path.lexists(aside):
        shutil.rmtree(aside)  # what is left fails again: the OSError names the path and why


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that readers see the old or the new file, never a partial one (0600)."""
    replace(path, json.dumps(data, indent=1))


def read_json(path: Path) -> Any:
    """A state file's JSON; OSError for a link or anything not a regular file; ValueError for
    anything trainop did not write: larger than MAX_STATE_BYTES, not JSON, or beyond a job
    source's bounds (nesting, values, integers)."""
    try:
        raw = read_state_bytes(path, MAX_STATE_BYTES)  # no link, no FIFO, bounded
    except ValueError:
        raise ValueError(f"larger than {MAX_STATE_BYTES // 2**20} MiB") from None
    try:
        data = json.loads(raw)
        check_tree(data)
    except RecursionError:
        raise ValueError("it is nested too deeply to read") from None
    except InvalidJobError as err:
        raise ValueError(str(err.problems[0]).replace("the job ", "it ", 1)) from None
    return data


@contextlib.contextmanager
def flocked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an fcntl lock on `path` (created 0600 if needed) for the block."""
    with open_private(path, "a") as handle:
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

    @property
    def create_lease(self) -> Path:
        return self.path / "create.lease"

    @property
    def follow_lease(self) -> Path:
        return self.path / "follow.lease"

    def log_file(self, replica: str) -> Path:
        if not is_replica(replica):  # never a path of its own: "../x" stays out
            raise NotFoundError(f"job {self.key} has no replica {replica!r}")
        return self.logs_dir / f"{replica}.log"

    def exists(self) -> bool:
        """The job's directory is there (its files may still be damaged)."""
        return self.path.is_dir() and not self.path.is_symlink()

    def check_removable(self) -> None:
        """OSError (EROFS or EACCES, naming the directory) unless this process may remove the
        job: a read-only file system, or a directory of another user's, is found before a
        delete stops anything."""
        for directory in (self.path.parent, self.path, self.logs_dir):
            if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
                read_only = os.statvfs(directory).f_flag & os.ST_RDONLY
                code = errno.EROFS if read_only else errno.EACCES
                raise OSError(code, os.strerror(code), str(directory))

    # --- job.json -----------------------------------------------------------------------------
    def read_job(self) -> dict[str, Any]:
        """job.json; NotFoundError if the job is gone, DamagedJobError if it cannot be read."""
        try:
            data = read_json(self.job_file)
        except FileNotFoundError:
            if self.path.is_dir():
                raise self.damaged("job.json is missing") from None
            raise NotFoundError(f"job {self.key} not found") from None
        except (ValueError, OSError) as exc:
            raise self.damaged(f"job.json cannot be read: {_reason(exc)}") from None
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise self.damaged("job.json does not hold a job")
        if not isinstance(data.get("metadata"), dict) or not isinstance(data.get("spec"), dict):
            raise self.damaged("job.json does not hold a job")
        if not _is_status(data.get("status")):
            raise self.damaged("job.json holds a status that is not a job status")
        return data

    def damaged(self, what: str) -> DamagedJobError:
        namespace, name = self.key.split("/", 1)
        if not os.access(self.path, os.W_OK | os.X_OK):  # nothing this user can remove
            return DamagedJobError(
                f"job {self.key} is unreadable: {what} (in {self.path}, which this user "
                "cannot change: another user's, or on a read-only file system)"
            )
        return DamagedJobError(
            f"job {self.key} is damaged: {what} (in {self.path}); "
            f"`trainop delete {name} -n {namespace}` removes it"
        )

    def read_local(self) -> dict[str, Any]:
        """local.json, checked: the working directory and a port per replica id."""
        try:
            data = read_json(self.local_file)
        except (ValueError, OSError) as exc:
            raise self.damaged(f"local.json cannot be read: {_reason(exc)}") from None
        ports = data.get("ports") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("workdir"), str)
            or not isinstance(ports, dict)
            or not all(is_replica(k) and _is_port(v) for k, v in ports.items())
        ):
            raise self.damaged("local.json does not hold a working directory and replica ports")
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
        """Append one event; past EVENTS_MAX_BYTES the oldest events are dropped (the file is
        rewritten with the newest EVENTS_KEEP_BYTES, under the file's own lock)."""
        if len(message) > MAX_EVENT_MESSAGE:
            message = message[:MAX_EVENT_MESSAGE] + " [cut]"
        record = {"time": format_time(utc_now()), "type": type_, "reason": reason}
        record["message"] = message
        line = (json.dumps(record) + "\n").encode()
        while True:
            with open_private(self.events_file, "ab") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                if not _same_file(handle, self.events_file):
                    continue  # trimmed (replaced) while we waited for the lock: append to the new
                handle.write(_after_last_line(handle) + line)
                handle.flush()
                if os.fstat(handle.fileno()).st_size > EVENTS_MAX_BYTES:
                    replace(self.events_file, _tail_lines(self.events_file, EVENTS_KEEP_BYTES))
                return

    def read_events(self) -> list[dict[str, str]]:
        """The readable events among the newest EVENTS_MAX_BYTES of the file (a garbled line is
        skipped, not fatal); DamagedJobError if the file cannot be read at all."""
        try:
            text = _tail_lines(self.events_file, EVENTS_MAX_BYTES).decode(errors="replace")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self.damaged(f"events.jsonl cannot be read: {_reason(exc)}") from None
        return [event for line in text.splitlines() if (event := _event(line)) is not None]

    # --- supervisor liveness ------------------------------------------------------------------
    def supervisor_alive(self) -> bool:
        """True while a supervisor holds the lock (a dead process holds no fcntl lock)."""
        return is_held(self.supervisor_lock)

    def read_supervisor_pid(self) -> int | None:
        """The pid the supervisor wrote; None if it is missing or damaged (read bounded)."""
        try:
            with self.supervisor_pid.open("rb") as handle:
                text = handle.read(32).decode(errors="replace").strip()
        except OSError:
            return None
        return int(text) if text.isascii() and text.isdigit() and 0 < int(text) < 2**22 else None


class StateRoot:
    """The `$TRAINOP_HOME` tree: where each namespace/name lives and which jobs exist."""

    def __init__(self, home: Path | None = None) -> None:
        # Absolute: supervisors run in their job directory, and the job directory's path is
        # every replica's job marker (`procs.JOB_MARKER`), which must read the same everywhere.
        self.home = Path(os.path.abspath(home if home is not None else trainop_home()))

    @property
    def jobs_root(self) -> Path:
        return self.home / "jobs"

    @property
    def ports_lock(self) -> Path:
        return self.home / "ports.lock"

    def job_dir(self, name: str, namespace: str) -> JobDir:
        """The directory of namespace/name; names that cannot be job names are never found."""
        if not (is_job_name(name) and is_namespace(namespace)):
            raise NotFoundError(f"job {namespace!r:.70}/{name!r:.70} not found (not a valid name)")
        return JobDir(self.jobs_root / namespace / name)

    def namespace_dir(self, namespace: str) -> Path:
        """jobs/<namespace>, created private if needed."""
        if not is_namespace(namespace):
            raise NotFoundError(f"namespace {namespace!r:.70} not found (not a valid name)")
        if not self.home.is_dir():  # TRAINOP_HOME itself: made private, never tightened
            self.home.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                self.home.mkdir(mode=DIR_MODE)
        private_dir(self.jobs_root)
        return private_dir(self.jobs_root / namespace)

    def existing(self, name: str, namespace: str) -> JobDir:
        job_dir = self.job_dir(name, namespace)
        if not job_dir.exists():
            raise NotFoundError(f"job {namespace}/{name} not found")
        return job_dir

    def all_jobs(self, namespace: str | None = None) -> list[JobDir]:
        """Every job directory (of one namespace or all), sorted by namespace then name. Only
        directories named like namespaces and jobs count (no symlink, no temporary directory)."""
        if namespace is not None and not is_namespace(namespace):
            return []
        if not self.jobs_root.is_dir():
            return []
        spaces = [self.jobs_root / namespace] if namespace else sorted(self.jobs_root.iterdir())
        found: list[JobDir] = []
        for space in spaces:
            if is_namespace(space.name) and space.is_dir() and not space.is_symlink():
                found.extend(JobDir(p) for p in sorted(space.iterdir()) if is_job_name(p.name))
        return [job for job in found if job.exists()]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc).split("\n")[0][:200] or type(exc).__name__


def _is_status(status: Any) -> bool:
    """What readers of the wire status rely on: a mapping whose conditions are mappings."""
    if status is None:
        return True
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return isinstance(status, dict) and (
        conditions is None
        or (isinstance(conditions, list) and all(isinstance(c, dict) for c in conditions))
    )


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _same_file(handle: IO[bytes], path: Path) -> bool:
    with contextlib.suppress(OSError):
        here, there = os.fstat(handle.fileno()), os.stat(path, follow_symlinks=False)
        return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
    return False


def _after_last_line(handle: IO[bytes]) -> bytes:
    """A newline if the file ends inside a line (a write cut short): the next event must not be
    glued to it."""
    size = os.fstat(handle.fileno()).st_size
    return b"\n" if size and os.pread(handle.fileno(), 1, size - 1) != b"\n" else b""


def _tail_lines(path: Path, limit: int) -> bytes:
    """The whole lines among the last `limit` bytes of a file (bounded memory however large)."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= limit:
            return handle.read(limit)
        handle.seek(size - limit - 1)
        data = handle.read(limit + 1)
    if data[:1] == b"\n":
        return data[1:]
    cut = data.find(b"\n")
    return data[cut + 1 :] if cut >= 0 else b""


def _event(line: str) -> dict[str, str] | None:
    """One event line as a mapping of strings; None for a line that is not one."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict):
        return None
    return {key: value for key, value in event.items() if isinstance(value, str)}
