"""The watcher: the first process of a job's detached pair, parent of its supervisor.

It is a child subreaper (PR_SET_CHILD_SUBREAPER): every process a replica orphans (a double
fork, a `setsid()` daemon) is re-parented to it instead of init. It shares the supervisor's
`supervisor.lock`, passes stop signals on, and when the supervisor ends (finished, stopped,
crashed or SIGKILLed) kills every process still below it before it exits and so releases the
lock: whoever sees the lock free knows nothing of the job runs any more. It works without the
supervisor being alive, which is the point; only killing both at once escapes it, and then the
job's environment marker lets the next supervisor or `delete` find the leftovers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from typing import Any

from trainop_core.backends.local.procs import kill_children, set_child_subreaper
from trainop_core.backends.local.state import JobDir, read_json, write_private
from trainop_core.backends.local.status import failed_status, is_finished
from trainop_core.backends.local.supervisor import STOP_SIGNALS, Supervisor
from trainop_core.errors import TrainopError

MAX_RESTARTS = 5  # per job, by watchers (see `restart_queued`)


def serve(job_dir: JobDir, lock_fd: int) -> int:
    """Run the job: this process, which holds the job's lock on `lock_fd`, becomes the watcher
    and forks the supervisor; it returns (and so releases the lock) only once the supervisor
    and everything its replicas left behind are gone."""
    os.set_inheritable(lock_fd, False)  # replicas must not keep the job locked after we die
    set_child_subreaper()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            # SIGUSR1 only says "look again", and the supervisor looks once it is ready; until it
            # has its handler, the signal's default action would kill it.
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            write_private(job_dir.supervisor_pid, f"{os.getpid()}\n")
            code = run_job(job_dir)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    code = watch(pid)
    if code > 128:  # killed by a signal: a queued job is not left without a supervisor
        restart_queued(job_dir, lock_fd, code - 128)
    return code


def restart_queued(job_dir: JobDir, lock_fd: int, killed_by: int) -> None:
    """Start a new supervisor for a queued, unfinished job whose supervisor was killed, unless
    someone asked it to stop, then run the admission step the supervisor may not have run (its
    job finished and it was killed before it could let the next one in). Other local jobs wait
    for a client to recover them; a queued one may hold quota that every job behind it needs."""
    from trainop_core.backends.local.queue import admit, record_of
    from trainop_core.backends.local.spawn import spawn_supervisor
    from trainop_core.backends.local.state import StateRoot

    try:
        queued = record_of(read_json(job_dir.local_file)) is not None
        finished = is_finished(job_dir.read_job().get("status") or {})
    except (OSError, ValueError, TrainopError):
        return
    if queued and not finished and not job_dir.control_file.exists() and _may_restart(job_dir):
        os.close(lock_fd)  # everything below us is gone: the job is free for a new supervisor
        with contextlib.suppress(OSError, TrainopError):
            name = signal.Signals(killed_by).name if killed_by in signal.valid_signals() else ""
            message = f"the supervisor was killed ({name or killed_by}); a new one was started"
            job_dir.append_event("Warning", "SupervisorRestarted", message)
            spawn_supervisor(job_dir, fresh=True)
    if queued:
        with contextlib.suppress(OSError, TrainopError):
            admit(StateRoot(job_dir.path.parents[2]))  # no restarts from here: see `admit`


def _may_restart(job_dir: JobDir) -> bool:
    """At most MAX_RESTARTS replacements per job: a supervisor killed over and over (the OOM
    killer) is left lost, for a client to recover, rather than restarted forever."""
    events = job_dir.read_events()
    return sum(e.get("reason") == "SupervisorRestarted" for e in events) < MAX_RESTARTS


def watch(supervisor: int) -> int:
    """The watcher's life: reap adopted orphans until the supervisor exits (a stop signal is
    passed on to it), then kill every process still below us. Returns the supervisor's code."""

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    code = 1
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == supervisor:
            code = os.waitstatus_to_exitcode(status)
            break
    kill_children()
    return 128 - code if code < 0 else code


def run_job(job_dir: JobDir) -> int:
    """Supervise the job; a job whose state cannot be run (local.json damaged, a kind this
    installation lacks) is recorded Failed, so that clients stop waiting for it."""
    try:
        supervisor = Supervisor(job_dir)
    except (TrainopError, LookupError) as err:
        with contextlib.suppress(TrainopError, OSError):
            record_failed(job_dir, f"the local supervisor cannot run the job: {err}")
        print(f"trainop supervisor: {err}", file=sys.stderr)
        return 1
    return supervisor.run()


def record_failed(job_dir: JobDir, reason: str) -> None:
    """Mark an unfinished job Failed with `reason` (job.json must be readable)."""

    def change(data: dict[str, Any]) -> None:
        status = data.get("status") or {}
        if not is_finished(status):
            data["status"] = failed_status(status, data["kind"], reason)

    job_dir.modify_job(change)
