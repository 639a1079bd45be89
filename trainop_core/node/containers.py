"""One container of a pod as processes: start, exit, kill, and its Kubernetes status.

A :class:`ContainerRun` is started through a :class:`Launch` (argv, env, directory, cgroup,
mounts, the network sandbox's wrapper), in a session of its own, its output pumped into its CRI
log. When its first process exits, whatever it left (its cgroup, its session, processes carrying
its marker) is killed, as a runtime ends a container; its exit code is the runtime's (128+n for
signal n) and its reason OOMKilled when its cgroup's OOM-kill counter moved, else Completed or
Error.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.backends.local.procs import POD_MARKER, kill_marked, kill_session, started_at
from trainop_core.backends.process.kubelet import exit_code_of
from trainop_core.node import _launch, logs
from trainop_core.node.cgroups import Cgroup
from trainop_core.node.probes import ContainerProbes
from trainop_core.node.volumes import Mount

Obj = dict[str, Any]


def in_container(launch: Launch, argv: Sequence[str]) -> list[str]:
    """`argv` run in the container of `launch`: through the launcher, which joins its cgroups
    first (entering the pod's network remounts /sys), then its mounts, then its network."""
    spec = {
        "cgroups": list(launch.cgroup.procs_files) if launch.cgroup else [],
        "mounts": [[m.source, m.target, m.read_only] for m in launch.mounts],
    }
    boot = [sys.executable, "-I", "-S", _launch.__file__, json.dumps(spec), str(os.getpid())]
    return [*boot, "--", *launch.wrap(list(argv))]


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one run of a container."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: Path
    cgroup: Cgroup | None = None
    mounts: Sequence[Mount] = ()
    wrap: Callable[[list[str]], list[str]] = field(default=lambda argv: argv)


class ContainerRun:
    """A container's current process (if any) and its status fields."""

    def __init__(self, spec: Obj, uid: str) -> None:
        self.spec = spec
        self.name = str(spec["name"])
        self.image = str(spec.get("image") or "")
        self.marker = f"{uid}/{self.name}"  # POD_MARKER of its processes
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroup: Cgroup | None = None
        self.restart_count = 0
        self.runs = 0  # how many times a process was started
        self.state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: Obj = {}
        self.restart_at: float | None = None
        self._oom_before = 0
        self._started: int | None = None  # the process's start time (procs.started_at)
        self.launch: Launch | None = None  # how the current (or last) run was started
        self.pump: threading.Thread | None = None  # copies its output into its log
        self.probes: ContainerProbes | None = None  # the current run's probes (none: always ok)
        self.probe_kill_at: float | None = None  # a failed probe's SIGKILL is due then
        self.probe_killed = False  # the current run was killed for a failed probe

    def env(self, launch: Launch) -> dict[str, str]:
        """The environment of the container's processes (an exec's too)."""
        return {**launch.env, POD_MARKER: self.marker}

    @property
    def log_running(self) -> bool:
        """Is the current run alive, or its log still being written?"""
        return self.alive or (self.pump is not None and self.pump.is_alive())

    # --- running -----------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def ready(self) -> bool:
        """Running, and its readiness (and startup) probe passed if it has one."""
        return self.running and (self.probes is None or self.probes.ready)

    @property
    def terminated(self) -> Obj | None:
        found: Obj | None = self.state.get("terminated")
        return found

    def start(self, launch: Launch) -> None:
        """Start a process for this container (state running), or end it with the launcher's
        exit code if it cannot start (state terminated, reason StartError)."""
        self.restart_at = None
        self.probes, self.probe_kill_at, self.probe_killed = None, None, False
        self.cgroup = launch.cgroup
        self.launch = launch
        self._oom_before = launch.cgroup.oom_kills() if launch.cgroup else 0
        self.proc = subprocess.Popen(
            in_container(launch, launch.argv),
            cwd=launch.cwd,
            env=self.env(launch),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.pump = logs.pump(self.proc.stdout, self.proc.stderr, launch.log_path)
        self._started = started_at(self.proc.pid)
        self.runs += 1
        self.state = {"running": {"startedAt": now_rfc3339()}}

    def reap(self) -> Obj | None:
        """If the process exited: kill its leftovers and return its `terminated` state."""
        if self.proc is None or (code := self.proc.poll()) is None:
            return None
        self.kill_leftovers()
        exit_code = exit_code_of(code)
        oom = self.cgroup is not None and self.cgroup.oom_kills() > self._oom_before
        reason = "OOMKilled" if oom else "Completed" if exit_code == 0 else "Error"
        started = self.state.get("running", {}).get("startedAt", now_rfc3339())
        self.proc = None
        return {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now_rfc3339(),
            "containerID": self.container_id,
        }

    def signal(self, sig: int) -> None:
        """Signal the container's process group (and, for SIGKILL, everything in its cgroup)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        if sig == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill_all()

    def kill_leftovers(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill_all()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            kill_session(self.proc.pid, self._started)
        kill_marked(POD_MARKER, self.marker, since=self._started)

    # --- status ------------------------------------------------------------------------------
    @property
    def container_id(self) -> str:
        return f"trainop://{self.marker}/{self.runs}"

    def status(self) -> Obj:
        """The container's entry in the pod's containerStatuses."""
        running = self.running
        started = running and (self.probes is None or self.probes.started)
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": self.container_id if self.runs else "",
            "ready": self.ready,
            "started": started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
