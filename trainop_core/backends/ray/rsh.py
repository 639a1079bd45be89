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

from trainop_core.private_files import replace

AGENT_NAME = "exec-agent"
READ_LIMIT_BYTES = 256 * 1024


def node_dir(uid: str) -> Path:
    """The job's directory on every node (node-local, the same path everywhere; made and checked
    by `private_files.private_dir` before anything is written into it)."""
    return Path(tempfile.gettempdir()) / f"trainop-{uid}"


def write_agent(path: Path, gcs_address: str, namespace: str, job: str) -> Path:
    call = shlex.join([sys.executable, "-m", __name__, gcs_address, namespace, job])
    return replace(path, f'#!/bin/sh\nexec {call} "$@"\n', mode=0o700)


class Execs:
    """Commands run in a replica's pod on request (`start`), followed (`read`) and stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._procs: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
        self._lock = threading.Lock()

    def start(self, specs: Path, pod: str, argv: list[str]) -> int:
        from trainop_core.backends.process.kubelet import spawn_from_threads
        from trainop_core.backends.process.podspec import Step

        command = (sys.executable, "-m", "trainop_core.backends.process.podexec", str(specs), pod)
        step = Step("exec", (*command, *argv), dict(os.environ), str(self.root))
        with self._lock:
            number = len(self._procs)
            log = self.root / f"exec-{number}.log"
            with log.open("wb") as out:
                self._procs[number] = (spawn_from_threads(step, out, {}), log)
        return number

    def read(self, number: int, offset: int, timeout: float) -> dict[str, Any]:
        """Output from `offset` on, and the exit code once the command ended and all was read."""
        proc, log = self._procs[number]
        deadline = time.monotonic() + timeout
        while proc.poll() is None and log.stat().st_size <= offset and time.monotonic() < deadline:
            time.sleep(0.05)
        code = proc.poll()
        with log.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(READ_LIMIT_BYTES)
        done = code is not None and offset + len(data) >= log.stat().st_size
        return {"data": data, "offset": offset + len(data), "code": code if done else None}

    def stop(self, number: int) -> None:
        proc, _ = self._procs[number]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def close(self) -> None:
        for number in list(self._procs):
            self.stop(number)


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
