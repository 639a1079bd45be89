"""One pod on a process node: init containers in order, then every container, restarted in place
by the pod's restartPolicy with back-off, terminated SIGTERM-then-SIGKILL; its status as a
kubelet writes it.

No API access here: the node gives a :class:`PodRun` a `launcher` that turns a container spec into
a :class:`~trainop_core.node.containers.Launch` (env, volumes, cgroup: it may raise
:class:`~trainop_core.node.podenv.ConfigError` or :class:`~trainop_core.node.images.ImageError`,
then the container waits, saying why) and calls :meth:`PodRun.poll` from one thread.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from trainop_core.node.containers import ContainerRun, Launch, now_rfc3339
from trainop_core.node.images import NO_IMAGE_REASON, ImageError
from trainop_core.node.podenv import ConfigError

Obj = dict[str, Any]
Launcher = Callable[[Obj, int], Launch]  # (container spec, restartCount) -> Launch
BACKOFF_START = 1.0  # a kubelet starts at 10 s; shorter here, so a try-it job retries promptly
BACKOFF_MAX = 60.0  # a kubelet's is 300 s
CONFIG_RETRY = 2.0  # seconds between attempts at a container that could not be configured


def backoff(restarts: int) -> float:
    """The wait before restart number `restarts`: 1 s, 2 s, 4 s, ... up to a minute."""
    return float(min(BACKOFF_MAX, BACKOFF_START * 2 ** max(0, restarts - 1)))


class PodRun:
    """A pod's containers on this node; `poll` moves them on, `status` says where they are."""

    def __init__(self, pod: Obj, launcher: Launcher, pod_ip: str, host_ip: str) -> None:
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        self.uid = uid
        self.policy = str(spec.get("restartPolicy") or "Always")
        self.init = [ContainerRun(c, uid) for c in spec.get("initContainers") or []]
        self.main = [ContainerRun(c, uid) for c in spec.get("containers") or []]
        self.launcher = launcher
        self.pod_ip, self.host_ip = pod_ip, host_ip
        self.start_time = now_rfc3339()
        self.terminating = False
        self.kill_at: float | None = None
        self._transitions: dict[str, tuple[bool, str]] = {}

    # --- moving on ---------------------------------------------------------------------------
    def poll(self, now: float) -> None:
        """Reap exits, start what is due. Called often, from one thread."""
        for run in (*self.init, *self.main):
            if (ended := run.reap()) is not None:
                self._exited(run, ended, now)
        if self.terminating:
            if self.kill_at is not None and now >= self.kill_at:
                for run in (*self.init, *self.main):
                    run.signal(signal.SIGKILL)
            return
        if self.phase in ("Succeeded", "Failed"):
            return
        pending = self._next_init()
        if pending is not None:
            self._start_if_due(pending, now)
            return
        for run in self.main:
            self._start_if_due(run, now)

    def _next_init(self) -> ContainerRun | None:
        """The init container that has not yet completed (None once all have)."""
        for run in self.init:
            ended = run.terminated
            if ended is None or ended["exitCode"] != 0:
                return run
        return None

    def _start_if_due(self, run: ContainerRun, now: float) -> None:
        if run.alive or run.terminated is not None:
            return
        if run.restart_at is not None and now < run.restart_at:
            return
        if run.runs:
            run.restart_count += 1
        try:
            run.start(self.launcher(run.spec, run.restart_count))
        except (ConfigError, ImageError, OSError) as exc:
            if run.runs and run.restart_count:
                run.restart_count -= 1  # nothing was started again
            reason = "CreateContainerConfigError"
            if isinstance(exc, ImageError):
                reason = NO_IMAGE_REASON
            elif isinstance(exc, OSError):
                reason = "RunContainerError"
            run.state = {"waiting": {"reason": reason, "message": str(exc)}}
            run.restart_at = now + CONFIG_RETRY

    def _exited(self, run: ContainerRun, ended: Obj, now: float) -> None:
        is_init = run in self.init
        code = ended["exitCode"]
        restarts = not self.terminating and (
            (self.policy == "Always" and not is_init) or (self.policy != "Never" and code != 0)
        )
        if not restarts:
            run.state = {"terminated": ended}
            return
        delay = backoff(run.restart_count + 1)
        run.last_state = {"terminated": ended}
        message = f"back-off {delay:g}s restarting failed container={run.name} pod={self.uid}"
        run.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        run.restart_at = now + delay

    # --- stopping ----------------------------------------------------------------------------
    def terminate(self, grace: float, now: float) -> None:
        """SIGTERM every container now, SIGKILL what is left `grace` seconds later. Idempotent
        (a shorter grace given later brings the SIGKILL forward, as a kubelet does)."""
        deadline = now + max(0.0, grace)
        if self.terminating and self.kill_at is not None and self.kill_at <= deadline:
            return
        first = not self.terminating
        self.terminating, self.kill_at = True, deadline
        for run in (*self.init, *self.main):
            run.restart_at = None
            if first:
                run.signal(signal.SIGTERM)

    @property
    def stopped(self) -> bool:
        """No process of the pod is left."""
        return not any(run.alive for run in (*self.init, *self.main))

    def kill(self) -> None:
        """SIGKILL everything at once and wait for the processes (a force deletion)."""
        for run in (*self.init, *self.main):
            run.signal(signal.SIGKILL)
            if run.proc is not None:
                run.proc.wait(10)
                run.reap()

    # --- status ------------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self._next_init() is None

    @property
    def phase(self) -> str:
        init_failed = any((t := r.terminated) is not None and t["exitCode"] != 0 for r in self.init)
        if init_failed:
            return "Failed"
        if not self.initialized:
            return "Pending"
        ended = [r.terminated for r in self.main]
        if all(e is not None for e in ended) and self.main:
            return "Succeeded" if all(e["exitCode"] == 0 for e in ended if e) else "Failed"
        return "Running" if any(r.runs for r in self.main) else "Pending"

    def status(self) -> Obj:
        """The pod's status as a kubelet writes it (for a merge patch of pods/status)."""
        ready = bool(self.main) and all(r.running for r in self.main) and not self.terminating
        phase = self.phase
        done_reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        status: Obj = {
            "phase": phase,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": [
                self._condition("PodReadyToStartContainers", True),
                self._condition("Initialized", self.initialized, "ContainersNotInitialized"),
                self._condition("Ready", ready, done_reason),
                self._condition("ContainersReady", ready, done_reason),
                self._condition("PodScheduled", True),
            ],
            "containerStatuses": [r.status() for r in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [r.status() for r in self.init]
        return status

    def _condition(self, kind: str, ok: bool, reason: str = "") -> Obj:
        value = "True" if ok else "False"
        held = self._transitions.get(kind)
        if held is None or held[0] != ok:
            held = (ok, now_rfc3339())
            self._transitions[kind] = held
        condition: Obj = {"type": kind, "status": value, "lastProbeTime": None,
                          "lastTransitionTime": held[1]}  # fmt: skip
        if not ok and reason:
            condition["reason"] = reason
        return condition
