"""One replica's actor: it holds the replica's bundle and runs the replica's pod as processes.

The supervisor creates it in the replica's bundle of the job's placement group and asks it for its
address (`endpoint`: the node's IP and a port probed there) before any process starts; then it
hands over the planned pod (`start`). The pod runs exactly as on the local backend
(`backends.process.kubelet.LocalPod`: init containers in order, `$(VAR)` expansion, in-place
restarts for OnFailure/Always, exit codes), in a session of its own, and dies with the actor's
process (PR_SET_PDEATHSIG). Its output goes into a pipe (a FIFO in the replica's directory,
which the pod's processes open like a log file) that a thread of the actor drains into a
bounded buffer (`OUTPUT_LIMIT_BYTES`, the oldest output dropped first with a marker): nothing
grows on the node's disk or in the actor however much a replica prints. The supervisor reads
that buffer through `watch`.

The actor is threaded: `watch` blocks until something changed while `stop` may come in.
"""

from __future__ import annotations

import dataclasses
import os
import select
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray

from trainop_core.backends.process.kubelet import LocalPod, spawn_from_threads, stop_pods
from trainop_core.backends.process.podexec import (
    remove_exec_spec,
    write_configmaps,
    write_exec_spec,
)
from trainop_core.backends.process.podspec import Step, base_env, launch_spec
from trainop_core.backends.ray.logbuffer import DEFAULT_LIMIT_BYTES, LogBuffer
from trainop_core.backends.ray.rsh import AGENT_NAME, Execs, node_dir, write_agent
from trainop_core.private_files import private_dir

POLL_SECONDS = 0.05
READ_LIMIT_BYTES = 256 * 1024
BATCH_SECONDS = 0.1  # output is handed over at most this often unless the pod itself changed
OUTPUT_LIMIT_BYTES = DEFAULT_LIMIT_BYTES  # kept here until the supervisor has read it
PIPE_READ_BYTES = 64 * 1024


def probe_port(preferred: int | None, avoid: set[int]) -> int:
    """A port free on every interface of this node: `preferred` if it still is, else a new one."""
    candidates = [preferred] if preferred else []
    for _ in range(100):
        wanted = candidates.pop() if candidates else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", wanted))
            except OSError:
                continue
            port: int = sock.getsockname()[1]
        if port not in avoid:
            return port
    raise OSError("could not find a free TCP port on this node")


class Replica:
    """The actor class (made remote by `remote_class`)."""

    def __init__(self, job_key: str, replica: str, replica_type: str) -> None:
        self.job_key = job_key
        self.replica = replica
        self.replica_type = replica_type
        self.dir = Path(tempfile.mkdtemp(prefix="trainop-replica-"))
        self.log_path = self.dir / f"{replica}.log"  # a FIFO: see the module docstring
        os.mkfifo(self.log_path, 0o600)
        # Read and write: opening never blocks, and the pipe never reports end-of-file between
        # two processes of the pod (there is always this writer).
        self._pipe = os.open(self.log_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.output = LogBuffer(OUTPUT_LIMIT_BYTES)
        self.ip = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.pod: LocalPod | None = None
        self.node_dir: Path | None = None  # the job's exec specs, agent and ConfigMaps here
        self.execs = Execs(self.dir)
        self.stopped = False  # the pod was stopped: no more reaping or in-place restarts
        self.version = 0
        self.changed = threading.Condition()
        self.closed = False
        threading.Thread(target=self._kubelet, daemon=True, name="kubelet").start()
        threading.Thread(target=self._drain_pipe, daemon=True, name="output").start()

    # --- called by the supervisor ----------------------------------------------------------------
    def endpoint(
        self, preferred: int | None = None, avoid: list[int] | None = None
    ) -> dict[str, Any]:
        """This node's IP, a free port on it (`preferred` if free), and the node's id."""
        port = probe_port(preferred, set(avoid or ()))
        return {"ip": self.ip, "port": port, "node_id": self.node_id}

    def start(
        self,
        manifest: dict[str, Any],
        default_container: str,
        workdir: str | None,
        configmaps: list[dict[str, Any]] | None = None,
    ) -> int:
        """Run the planned pod (a stopped previous one is replaced), exec-able through the job's
        agent, with the kind's `configmaps` written on this node. `workdir` None: the actor's
        working directory, i.e. the job's files Ray unpacked on this node. Returns the report
        version from which reports are of this pod (earlier ones, still in flight, are not)."""
        env = base_env(os.environ)
        where = workdir or os.getcwd()
        spec = launch_spec(manifest, default_container, env, where, host_ip=self.ip)
        with self.changed:
            if self.pod is not None and self.pod.alive:
                raise RuntimeError(f"replica {self.replica} still runs pod {self.pod.name}")
            self.pod = LocalPod(spec, self.replica_type, self.log_path, spawn=spawn_from_threads)
            if self.output.end:
                what = f"replica {self.pod.replica} re-created as pod {self.pod.uid[:8]}"
                self.output.append(f"--- trainop: {what} ---\n".encode())
            self._node_files(manifest, spec.main, configmaps or [])
            self.stopped = False
            self.pod.start()
            self._bump()
            return self.version

    def exec_start(self, argv: list[str]) -> int:
        """Run `argv` in this replica's pod, on this node (an exec agent's request)."""
        assert self.pod is not None and self.node_dir is not None
        return self.execs.start(self.node_dir / "exec", self.pod.name, argv)

    def exec_read(self, number: int, offset: int, timeout: float) -> dict[str, Any]:
        return self.execs.read(number, offset, timeout)

    def exec_stop(self, number: int) -> None:
        self.execs.stop(number)

    def watch(self, version: int, offset: int, timeout: float) -> dict[str, Any]:
        """Wait (up to `timeout` s) until the pod changed past `version` or wrote past `offset`;
        then the pod as observed and the output from `offset` on (bounded)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.version == version and self._log_size() <= offset and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(min(left, POLL_SECONDS * 2))
            if self.version == version and self._log_size() > offset:
                self.changed.wait(BATCH_SECONDS)  # let more output gather: fewer, larger calls
            return self._report(offset)

    def stop(self) -> dict[str, Any]:
        """Stop the pod's processes (SIGTERM, its grace period, SIGKILL); its final report."""
        with self.changed:  # held throughout: the kubelet thread must not restart it meanwhile
            self.stopped = True
            if self.pod is not None:
                stop_pods([self.pod])
                if self.node_dir is not None:
                    remove_exec_spec(self.node_dir / "exec", self.pod.name)
            self._bump()
            return self._report(self._log_size())

    def close(self) -> None:
        """Stop everything and remove this replica's files from the node (before the actor goes)."""
        self.stop()
        self.execs.close()
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.node_dir is not None:
            shutil.rmtree(self.node_dir, ignore_errors=True)

    def _node_files(self, manifest: dict[str, Any], main: Step, configmaps: list[Any]) -> None:
        """What the job's exec agent needs on this node (see rsh.py)."""
        assert self.pod is not None
        owner = (manifest["metadata"].get("ownerReferences") or [{}])[0]
        self.node_dir = node_dir(str(owner.get("uid", "")))
        private_dir(self.node_dir)  # a link or another user's directory planted there: refused
        write_exec_spec(self.node_dir / "exec", self.pod.name, main, self.pod.markers())
        write_configmaps(self.node_dir / "configmaps", configmaps)
        namespace, _, job = self.job_key.partition("/")
        gcs = ray.get_runtime_context().gcs_address
        write_agent(self.node_dir / AGENT_NAME, gcs, namespace, job)

    # --- internals -------------------------------------------------------------------------------
    def _kubelet(self) -> None:
        """Reap exits and run in-place restarts, like a kubelet; wake watchers on any change."""
        while not self.closed:
            time.sleep(POLL_SECONDS)
            with self.changed:
                if self.pod and not self.stopped and self.pod.poll(time.monotonic()):
                    self._bump()

    def _drain_pipe(self) -> None:
        """Move what the pod's processes write into the bounded buffer, as it comes (the pipe
        is closed here, once the actor is closed, never under a `select` on it)."""
        try:
            while not self.closed:
                ready, _, _ = select.select([self._pipe], [], [], POLL_SECONDS * 4)
                if ready:
                    self._read_pipe()
        finally:
            os.close(self._pipe)

    def _read_pipe(self) -> None:
        with self.changed:
            try:
                data = os.read(self._pipe, PIPE_READ_BYTES)
            except BlockingIOError:
                return
            self.output.append(data)
            self.changed.notify_all()

    def _bump(self) -> None:
        self.version += 1
        self.changed.notify_all()

    def _log_size(self) -> int:
        return self.output.end

    def _report(self, offset: int) -> dict[str, Any]:
        data, after = self.output.read(offset, READ_LIMIT_BYTES)
        pod = self.pod
        return {
            "version": self.version,
            "pod": dataclasses.asdict(pod.observed()) if pod is not None else None,
            "running": pod is not None and (pod.alive or pod.next_wakeup() is not None),
            "log": data,
            "offset": after,
        }


def remote_class() -> Any:
    """The Ray actor class of `Replica` (threaded: `watch` blocks while `stop` may arrive)."""
    make: Any = ray.remote  # its overloads do not know actor options
    return make(max_concurrency=4, max_restarts=0)(Replica)
