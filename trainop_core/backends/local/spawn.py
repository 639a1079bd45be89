"""Starting a job's supervisor so that it outlives whoever started it.

The supervisor must hold the job's `supervisor.lock` from the first moment (so that no second
supervisor can start and `delete` never races a starting one): the starter takes the lock and the
supervisor inherits the locked descriptor. It is nobody's child (double fork: no zombie for the
starter to reap; the detached process is the supervisor's watcher, see `watcher`) and
runs in a session of its own (a Ctrl-C in the starter's terminal is the
starter's business, which then asks the supervisor to stop).

Two ways, same result: a single-threaded starter (the `trainop` CLI) forks, so the supervisor
starts with trainop already imported (about 0.3 s of CPU saved per job on the critical path); a
multi-threaded one (an application, a Ray worker) must not fork and execs a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from trainop_core.backends.local.state import JobDir, open_private, read_json
from trainop_core.errors import TrainopError
from trainop_core.private_files import append_fd, open_lock

_BOOT = (
    "import os, sys\n"
    "if os.fork(): os._exit(0)\n"
    "sys.path.insert(0, {root!r})\n"
    "from trainop_core.backends.local.supervisor import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def spawn_supervisor(job_dir: JobDir, *, new_job: bool = False, fresh: bool = False) -> bool:
    """Start the job's supervisor, detached; False if a supervisor already holds the lock.

    For a `new_job` no supervisor can exist yet: the lock is waited for (a client checking
    `supervisor_alive` holds it for an instant). A job being deleted gets none either: the
    deletion stopped its supervisor on purpose, and a follower restarting it meanwhile would
    see the replicas the deletion killed as failed and record the job Failed. `fresh`: exec a
    new interpreter even where forking would do (a watcher restarting its own supervisor)."""
    fd = open_lock(job_dir.supervisor_lock)
    try:
        if not _lock(fd, wait=new_job) or _deleting(job_dir):
            return False
        job_dir.control_file.unlink(missing_ok=True)
        job_dir.supervisor_pid.unlink(missing_ok=True)  # the new supervisor writes its own
        if _single_threaded() and not fresh:
            _fork(job_dir, fd)
        else:
            _exec(job_dir, fd)
        return True
    finally:
        os.close(fd)


def _deleting(job_dir: JobDir) -> bool:
    try:
        request = read_json(job_dir.control_file)
    except (OSError, ValueError):  # none, or damaged: not a deletion's
        return False
    return isinstance(request, dict) and request.get("delete") is True


def _single_threaded() -> bool:
    """True when forking is safe: no other thread at all, Python's or a native library's.

    `threading.active_count()` does not see threads started by C libraries (OpenMP pools,
    gRPC, Ray); a fork taken while one of those holds a lock can hang the child.
    """
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no procfs: trust the interpreter's count
        return True


def _lock(fd: int, *, wait: bool) -> bool:
    if wait:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    for _ in range(5):  # a probe holds the lock for microseconds; a supervisor for good
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.01)
    return False


def _exec(job_dir: JobDir, lock_fd: int) -> None:
    root = str(Path(__file__).resolve().parents[3])  # the directory holding trainop_core
    with open_private(job_dir.supervisor_log, "ab") as out:
        boot = subprocess.Popen(
            [sys.executable, "-c", _BOOT.format(root=root), str(job_dir.path), str(lock_fd)],
            pass_fds=(lock_fd,),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=job_dir.path,
        )
    if boot.wait() != 0:
        raise TrainopError(f"could not start the supervisor of {job_dir.key}: see {out.name}")


def _fork(job_dir: JobDir, lock_fd: int) -> None:
    from trainop_core.backends.local import watcher  # imported before the fork

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # else the child would write the starter's pending output again
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    code = 1
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        _detach_stdio(job_dir, lock_fd)
        code = watcher.serve(job_dir, lock_fd)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        os._exit(code)


def _detach_stdio(job_dir: JobDir, lock_fd: int) -> None:
    """Output to supervisor.log, nothing inherited kept open (a starter's pipe must see EOF)."""
    os.chdir(job_dir.path)
    null = os.open(os.devnull, os.O_RDONLY)
    log = append_fd(job_dir.supervisor_log)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep = sorted({0, 1, 2, lock_fd})
    for low, high in zip(keep, [*keep[1:], os.sysconf("SC_OPEN_MAX")], strict=True):
        os.closerange(low + 1, high)
