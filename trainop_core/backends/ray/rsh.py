"""`kubectl exec` across a Ray cluster: what an MPI launcher's rsh agent runs on the Ray backend.

    python -m trainop_core.backends.ray.rsh GCS_ADDRESS NAMESPACE JOB POD COMMAND...

The agent connects to the cluster as a driver, asks the job's supervisor for the actor of POD,
and has that actor run COMMAND on its own node, in its pod's environment (through
`trainop_core.backends.process.podexec`, which also gives it the pod's name as hostname and
marks it as the pod's, so it dies with the pod). The command's output comes back here, its exit
code is the agent's, and a signal to the agent stops it. `Execs` is the replica actor's side.

Each job has a directory of the same path on every node (`node_dir`): its pods' exec specs, the
agent as one executable file (an rsh agent is a path) and the ConfigMaps the kind planned.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from trainop_core.backends.ray.logbuffer import LogBuffer
from trainop_core.private_files import replace

AGENT_NAME = "exec-agent"
READ_LIMIT_BYTES = 256 * 1024  # per answer to the agent
EXEC_LIMIT_BYTES = 8 * 1024 * 1024  # output kept per command not yet read (oldest dropped)
PUMP_CHUNK_BYTES = 64 * 1024
POLL_SECONDS = 0.05  # how often a waiting read looks whether the command exited
EXIT_GRACE = 1.0  # seconds after the exit that output still held open by its leftovers is read


def node_dir(uid: str) -> Path:
    """The job's directory on every node (node-local, the same path everywhere; made and checked
    by `private_files.private_dir` before anything is written into it)."""
    return Path(tempfile.gettempdir()) / f"trainop-{uid}"


def write_agent(path: Path, gcs_address: str, namespace: str, job: str) -> Path:
    call = shlex.join([sys.executable, "-m", __name__, gcs_address, namespace, job])
    return replace(path, f'#!/bin/sh\nexec {call} "$@"\n', mode=0o700)


class Execs:
    """Commands run in a replica's pod on request (`start`), followed (`read`) and stopped.

    A command's output is kept in memory, bounded (`EXEC_LIMIT_BYTES`, the oldest dropped with a
    marker, as a replica's log is): it is read by the agent as it comes, so nothing on the node's
    disk grows with it (mpirun's daemons can talk for as long as the job runs)."""

    def __init__(self, root: Path, limit: int = EXEC_LIMIT_BYTES) -> None:
        self.root = root
        self.limit = limit
        self._procs: dict[int, _Exec] = {}
        self._lock = threading.Lock()

    def start(self, specs: Path, pod: str, argv: list[str]) -> int:
        from trainop_core.backends.process.kubelet import spawn_from_threads
        from trainop_core.backends.process.podspec import Step

        command = (sys.executable, "-m", "trainop_core.backends.process.podexec", str(specs), pod)
        step = Step("exec", (*command, *argv), dict(os.environ), str(self.root))
        read_end, write_end = os.pipe()
        try:
            with os.fdopen(write_end, "wb") as out:  # the parent's copy closes once spawned
                proc = spawn_from_threads(step, out, {})
        except BaseException:
            os.close(read_end)
            raise
        running = _Exec(proc, LogBuffer(self.limit))
        with self._lock:
            number = len(self._procs)
            self._procs[number] = running
        threading.Thread(target=running.pump, args=(read_end,), name=f"exec-{number}",
                         daemon=True).start()  # fmt: skip
        return number

    def read(self, number: int, offset: int, timeout: float) -> dict[str, Any]:
        """Output from `offset` on, and the exit code once the command ended and all was read.
        The command has ended when it exited and its output closed, or EXIT_GRACE seconds after
        it exited (a process it left behind may hold the output open)."""
        running = self._procs[number]
        deadline = time.monotonic() + timeout
        with running.cond:
            while running.output.end <= offset and not running.ended():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                running.cond.wait(min(left, POLL_SECONDS))
            data, after = running.output.read(offset, READ_LIMIT_BYTES)
            done = running.ended() and after >= running.output.end
        return {"data": data, "offset": after, "code": running.proc.poll() if done else None}

    def stop(self, number: int) -> None:
        proc = self._procs[number].proc
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def close(self) -> None:
        for number in list(self._procs):
            self.stop(number)


class _Exec:
    """One command: its process and its output, filled by `pump` until the pipe closes."""

    def __init__(self, proc: subprocess.Popen[bytes], output: LogBuffer) -> None:
        self.proc, self.output = proc, output
        self.cond = threading.Condition()
        self.eof = False
        self.exited_at: float | None = None

    def ended(self) -> bool:
        """Exited, and its output closed or EXIT_GRACE passed since (call with `cond` held)."""
        if self.proc.poll() is None:
            return False
        now = time.monotonic()
        if self.exited_at is None:
            self.exited_at = now
        return self.eof or now - self.exited_at >= EXIT_GRACE

    def pump(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(PUMP_CHUNK_BYTES):
                with self.cond:
                    self.output.append(chunk)
                    self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 5:
        print("usage: rsh GCS_ADDRESS NAMESPACE JOB POD COMMAND...", file=sys.stderr)
        return 2
    address, namespace, job, pod, command = args[0], args[1], args[2], args[3], args[4:]
    import ray

    from trainop_core.backends.ray.backend import RAY_NAMESPACE, actor_name

    ray.init(address=address, namespace=RAY_NAMESPACE, logging_level=logging.ERROR,
             log_to_driver=False)  # fmt: skip
    supervisor = ray.get_actor(actor_name(job, namespace), namespace=RAY_NAMESPACE)
    replica: Any = ray.get(supervisor.replica_actor.remote(pod))
    if replica is None:
        print(f'trainop exec: pod "{pod}" does not exist or is not running', file=sys.stderr)
        return 1
    number = ray.get(replica.exec_start.remote(command))

    def stop(signum: int, frame: object) -> None:
        ray.get(replica.exec_stop.remote(number), timeout=30)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    offset = 0
    while True:
        answer = ray.get(replica.exec_read.remote(number, offset, 2.0))
        sys.stdout.buffer.write(answer["data"])
        sys.stdout.flush()
        offset = answer["offset"]
        if answer["code"] is not None:
            code: int = answer["code"]
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
