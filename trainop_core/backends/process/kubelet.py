"""The kubelet-like part of the local backend: one pod's containers as processes.

It only runs what the supervisor (the operator-like part) tells it to, and restarts a container
in place the way a kubelet does for pod restartPolicy OnFailure/Always (same pod, restart count
+1, growing back-off). Every process gets a session (and process group) of its own so that it and
everything it spawned can be signalled together, and dies with the supervisor (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from trainop_core.backends.process.podspec import LaunchSpec, Step
from trainop_core.planner.types import ObservedPod

_PR_SET_PDEATHSIG = 1
_LIBC: Any = None
with contextlib.suppress(OSError):
    _LIBC = ctypes.CDLL(None, use_errno=True)

MAX_BACKOFF_SECONDS = 10.0


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec: SIGKILL us when the supervisor dies."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(137)


def exit_code_of(returncode: int) -> int:
    """Popen reports death by signal n as -n; a container runtime reports 128+n."""
    return 128 - returncode if returncode < 0 else returncode


def restart_delay(restarts: int) -> float:
    """Kubelet-like back-off, scaled down for a laptop: 0.2 s, 0.4 s, ... up to 10 s."""
    return float(min(MAX_BACKOFF_SECONDS, 0.2 * 2 ** max(0, restarts - 1)))


Spawner = Callable[[Step, IO[bytes]], "subprocess.Popen[bytes]"]


class LocalPod:
    """One pod: init containers in order, then the main container, restarted in place if asked.

    `spawn` starts one container's process; the default suits a single-threaded caller (the
    local supervisor), `spawn_from_threads` a multi-threaded one (a Ray actor)."""

    def __init__(
        self,
        spec: LaunchSpec | None,
        replica_type: str,
        log_path: Path,
        spawn: Spawner | None = None,
    ) -> None:
        self.spec = spec
        self._spawn = spawn or _spawn
        self.name = spec.pod_name if spec else ""
        self.replica_type = replica_type  # canonical, e.g. "Worker"
        self.index = spec.index if spec else 0
        self.log_path = log_path
        self.uid = uuid.uuid4().hex
        self.phase = "Pending"
        self.exit_code: int | None = None
        self.restart_count = 0
        self.reason = ""
        self.message = ""
        self.pid: int | None = None
        self._started: int | None = None  # the process's start time, see `started_at`
        self._proc: subprocess.Popen[bytes] | None = None
        self._step = 0  # index into init containers + main
        self._restart_at: float | None = None

    # --- running --------------------------------------------------------------------------------
    def start(self) -> None:
        if self.log_path.exists() and self.log_path.stat().st_size:
            self._mark(f"replica {self.replica} re-created as pod {self.uid[:8]}")
        self._launch()

    def poll(self, now: float) -> bool:
        """Reap an exited process and start what comes next. True if anything changed."""
        if self._proc is not None and (code := self._proc.poll()) is not None:
            self._on_exit(exit_code_of(code), now)
            return True
        if self._restart_at is not None and now >= self._restart_at:
            self._restart_at = None
            self._launch()
            return True
        return False

    def next_wakeup(self) -> float | None:
        """Monotonic time at which `poll` has something to do without a child exiting."""
        return self._restart_at

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def replica(self) -> str:
        return f"{self.replica_type.lower()}-{self.index}"

    def _steps(self) -> tuple[Step, ...]:
        assert self.spec is not None
        return (*self.spec.init, self.spec.main)

    def _launch(self) -> None:
        steps = self._steps()
        step = steps[self._step]
        in_init = self._step < len(steps) - 1
        if len(steps) > 1:  # with init containers, say which container the lines come from
            self._mark(f"{'init container' if in_init else 'container'} {step.container}")
        self.phase = "Pending" if in_init else "Running"
        with self.log_path.open("ab") as log:
            try:
                self._proc = self._spawn(step, log)
            except OSError as exc:
                log.write(f"trainop: cannot start {step.argv[0]!r}: {exc}\n".encode())
                self._proc, self.pid = None, None  # nothing of ours runs under the old pid
                self._on_exit(127 if isinstance(exc, FileNotFoundError) else 126, time.monotonic())
                self.reason = "StartError"
                return
        self.pid = self._proc.pid
        self._started = started_at(self.pid)

    def _on_exit(self, code: int, now: float) -> None:
        self._kill_leftovers()
        self._proc = None
        in_init = self._step < len(self._steps()) - 1
        if in_init and code == 0:
            self._step += 1
            self._launch()
        elif not in_init and self._restarts_in_place(code):
            self.restart_count += 1
            self._restart_at = now + restart_delay(self.restart_count)
            self._mark(f"container exited with code {code}; restart {self.restart_count} follows")
            self._step = len(self._steps()) - 1
        else:
            self._finish(code)

    def _restarts_in_place(self, code: int) -> bool:
        policy = self.spec.restart_policy if self.spec else "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _finish(self, code: int) -> None:
        self.phase = "Succeeded" if code == 0 else "Failed"
        self.exit_code = code
        self.reason = "Completed" if code == 0 else "Error"
        self.message = f"exit code {code}"

    def _mark(self, what: str) -> None:
        with self.log_path.open("a") as log:
            log.write(f"--- trainop: {what} ---\n")

    # --- stopping -------------------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """Signal the whole process group of the running container (if any)."""
        if self.pid is not None and self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def _kill_leftovers(self) -> None:
        # A container ends when its main process does; like a runtime, kill what it left behind.
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    def reap(self) -> None:
        """After stop: wait for the killed process and forget it (no zombie)."""
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            self._kill_leftovers()
            self._proc = None

    # --- reporting ------------------------------------------------------------------------------
    def observed(self) -> ObservedPod:
        return ObservedPod(
            name=self.name,
            replica_type=self.replica_type,
            index=self.index,
            phase=self.phase,
            exit_code=self.exit_code,
            restart_count=self.restart_count,
            reason=self.reason,
            message=self.message,
            uid=self.uid,
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "replicaType": self.replica_type,
            "index": self.index,
            "uid": self.uid,
            "pid": self.pid,
            "started": self._started,
            "phase": self.phase,
            "exitCode": self.exit_code,
            "restartCount": self.restart_count,
            "reason": self.reason,
            "message": self.message,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], log_path: Path) -> LocalPod:
        """A pod a previous supervisor ran. Unfinished ones are lost (see `lose`)."""
        pod = cls(None, record["replicaType"], log_path)
        pod.name, pod.index, pod.uid = record["name"], record["index"], record["uid"]
        pod.pid, pod.phase, pod.exit_code = record["pid"], record["phase"], record["exitCode"]
        pod.restart_count, pod.reason = record["restartCount"], record["reason"]
        pod.message, pod._started = record["message"], record.get("started")
        return pod

    def lose(self) -> None:
        """The supervisor that ran this pod died: kill what is left, report it Failed with no
        exit code (like a pod on a lost node; the planner treats that as retryable)."""
        if self.phase in ("Succeeded", "Failed"):
            return
        if self.pid is not None:
            kill_session(self.pid, self._started)
        self.phase, self.exit_code = "Failed", None
        self.reason, self.message = "SupervisorLost", "the local supervisor died while it ran"


def _spawn(step: Step, log: IO[bytes]) -> subprocess.Popen[bytes]:
    parent = os.getpid()
    return subprocess.Popen(
        list(step.argv),
        cwd=step.cwd,
        env=dict(step.env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: _die_with_parent(parent),  # the supervisor is single-threaded
    )


# Runs in the child between fork and exec of a multi-threaded parent, where Python code must not
# run (another thread may hold a lock the child would need): a tiny interpreter of its own asks
# for SIGKILL on the parent's death, checks the parent is still there, then execs the command.
_DIE_WITH_PARENT_EXEC = (
    "import ctypes, os, signal, sys\n"
    "try: ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "except (OSError, AttributeError): pass\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(137)\n"
    "os.execv(sys.argv[2], sys.argv[3:])\n"
)


def _resolve(step: Step) -> str:
    """The executable Popen would run for `step` (FileNotFoundError/PermissionError as Popen)."""
    program = step.argv[0]
    if os.sep in program:
        path = os.path.join(step.cwd, program)
    else:
        found = shutil.which(program, path=step.env.get("PATH", os.defpath))
        if found is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", program)
        path = found
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", program)
    if not os.access(path, os.X_OK):
        raise PermissionError(errno.EACCES, "Permission denied", program)
    return os.path.abspath(path)


def spawn_from_threads(step: Step, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Like the default spawner, for a multi-threaded parent (no Python code after fork): the
    child execs a minimal interpreter that arms PR_SET_PDEATHSIG and then execs the command."""
    program = _resolve(step)
    boot = [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT_EXEC, str(os.getpid())]
    return subprocess.Popen(
        [*boot, program, *step.argv],
        cwd=step.cwd,
        env=dict(step.env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def session_of(pid: int) -> int | None:
    """The session id of a live process, None if it is gone."""
    fields = _stat(pid)
    return int(fields[3]) if fields else None  # after ")": state ppid pgrp session ...


def started_at(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): with the pid, it names one process."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def kill_session(sid: int, leader_started: int | None = None) -> int:
    """SIGKILL every process of session `sid`: each replica runs in a session of its own.

    A session id cannot be reused while any member lives; once all are gone, a new session
    leader may get that number: if a leader with this pid exists but started at another time
    than `leader_started`, the session is someone else's and is left alone."""
    now_started = started_at(sid)
    if leader_started is not None and now_started is not None and now_started != leader_started:
        return 0
    killed = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and session_of(int(entry.name)) == sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def stop_pods(pods: Iterable[LocalPod]) -> None:
    """SIGTERM every pod's process group, wait up to the longest grace period, SIGKILL the rest."""
    running = [pod for pod in pods if pod.alive]
    for pod in running:
        pod.signal(signal.SIGTERM)
    grace = max((p.spec.grace_seconds for p in running if p.spec), default=0.0)
    deadline = time.monotonic() + grace
    while any(p.alive for p in running) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pod in running:
        pod.signal(signal.SIGKILL)
        pod.reap()
