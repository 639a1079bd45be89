"""The kubelet-like part of the local and Ray backends: one pod's containers as processes.

It only runs what the supervisor (the operator-like part) tells it to, and restarts a container
in place the way a kubelet does for pod restartPolicy OnFailure/Always (same pod, restart count
+1, growing back-off). Every process gets a session (and process group) of its own so that it and
everything it spawned can be signalled together, dies with the supervisor (PR_SET_PDEATHSIG), and
carries its job's and pod's markers (`procs`), so that whatever it left behind when it ends, even
in another session, is killed like a container runtime kills a container's leftovers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from trainop_core.backends.local.procs import (
    JOB_MARKER,
    POD_MARKER,
    die_with_parent,
    kill_marked,
    kill_session,
    session_of,
    started_at,
)
from trainop_core.backends.local.state import open_private
from trainop_core.backends.process.podspec import LaunchSpec, Step
from trainop_core.planner.types import ObservedPod

__all__ = [
    "LocalPod",
    "kill_session",
    "session_of",
    "spawn_from_threads",
    "started_at",
    "stop_pods",
]

MAX_BACKOFF_SECONDS = 10.0


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec: SIGKILL us when the supervisor dies."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(137)


def exit_code_of(returncode: int) -> int:
    """Popen reports death by signal n as -n; a container runtime reports 128+n."""
    return 128 - returncode if returncode < 0 else returncode


def restart_delay(restarts: int) -> float:
    """Kubelet-like back-off, scaled down for a laptop: 0.2 s, 0.4 s, ... up to 10 s."""
    return float(min(MAX_BACKOFF_SECONDS, 0.2 * 2 ** max(0, restarts - 1)))


Spawner = Callable[[Step, IO[bytes], Mapping[str, str]], "subprocess.Popen[bytes]"]


class LocalPod:
    """One pod: init containers in order, then the main container, restarted in place if asked.

    `spawn` starts one container's process; the default suits a single-threaded caller (the
    local supervisor), `spawn_from_threads` a multi-threaded one (a Ray actor)."""

    def __init__(
        self,
        spec: LaunchSpec | None,
        replica_type: str,
        log_path: Path,
        job_marker: str = "",
        spawn: Spawner | None = None,
    ) -> None:
        self.spec = spec
        self._spawn = spawn or _spawn
        self.job_marker = job_marker  # the job directory: JOB_MARKER in every process's env
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
        with open_private(self.log_path, "ab") as log:
            try:
                self._proc = self._spawn(step, log, self.markers())
            except (OSError, ValueError) as exc:  # ValueError: a NUL byte in argv or env
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
        with open_private(self.log_path, "ab") as log:
            log.write(f"--- trainop: {what} ---\n".encode())

    def markers(self) -> dict[str, str]:
        """The env markers every process of this pod carries (see `procs`)."""
        markers = {POD_MARKER: self.uid}
        if self.job_marker:
            markers[JOB_MARKER] = self.job_marker
        return markers

    # --- stopping -------------------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """Signal the whole process group of the running container (if any)."""
        if self.pid is not None and self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def _kill_leftovers(self) -> None:
        # A container ends when its main process does; like a runtime, kill what it left behind:
        # its process group, its session, and whatever carries its marker elsewhere.
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            kill_session(self.pid, self._started)
            kill_marked(POD_MARKER, self.uid, since=self._started)

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
    def from_record(cls, record: Any, log_path: Path, job_marker: str = "") -> LocalPod:
        """A pod a previous supervisor ran. Unfinished ones are lost (see `lose`). ValueError if
        the record is damaged (pods.json written by someone else, or garbled)."""
        _check_record(record)
        pod = cls(None, record["replicaType"], log_path, job_marker)
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
        kill_marked(POD_MARKER, self.uid, since=self._started)
        self.phase, self.exit_code = "Failed", None
        self.reason, self.message = "SupervisorLost", "the local supervisor died while it ran"


_RECORD_TYPES: Mapping[str, tuple[type, ...]] = {
    "name": (str,),
    "replicaType": (str,),
    "index": (int,),
    "uid": (str,),
    "pid": (int, type(None)),
    "started": (int, type(None)),
    "phase": (str,),
    "exitCode": (int, type(None)),
    "restartCount": (int,),
    "reason": (str,),
    "message": (str,),
}
_PHASES = ("Pending", "Running", "Succeeded", "Failed")


def _check_record(record: Any) -> None:
    if not isinstance(record, Mapping):
        raise ValueError("a pod record is not a mapping")
    for key, types in _RECORD_TYPES.items():
        value = record.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ValueError(f"pod record field {key!r} is {value!r:.40}")
    if record["phase"] not in _PHASES or record["index"] < 0 or (record["pid"] or 1) < 1:
        raise ValueError(f"pod record {record['name']!r:.40} is inconsistent")


def _spawn(step: Step, log: IO[bytes], markers: Mapping[str, str]) -> subprocess.Popen[bytes]:
    parent = os.getpid()
    return subprocess.Popen(
        list(step.argv),
        cwd=step.cwd,
        env={**step.env, **markers},
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


def spawn_from_threads(
    step: Step, log: IO[bytes], markers: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Like the default spawner, for a multi-threaded parent (no Python code after fork): the
    child execs a minimal interpreter that arms PR_SET_PDEATHSIG and then execs the command."""
    program = _resolve(step)
    boot = [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT_EXEC, str(os.getpid())]
    return subprocess.Popen(
        [*boot, program, *step.argv],
        cwd=step.cwd,
        env={**step.env, **markers},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


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
