"""One pod on a process node: init containers in order, then every container, restarted in place
by the pod's restartPolicy with back-off, terminated SIGTERM-then-SIGKILL; its status as a
kubelet writes it.

No API access here: the node gives a :class:`PodRun` a `launcher` that turns a container spec into
a :class:`~trainop_core.node.containers.Launch` (env, volumes, cgroup: it may raise
:class:`~trainop_core.node.podenv.ConfigError` or :class:`~trainop_core.node.images.ImageError`,
then the container waits, saying why) and calls :meth:`PodRun.poll` from one thread.
"""

from __future__ import annotations

import queue
import signal
from collections.abc import Callable
from typing import Any, Protocol

from trainop_core.node.containers import ContainerRun, Launch, now_rfc3339
from trainop_core.node.images import NO_IMAGE_REASON, ImageError
from trainop_core.node.podenv import ConfigError
from trainop_core.node.probes import ContainerProbes, Probe, container_probes

Obj = dict[str, Any]
Launcher = Callable[[Obj, int], Launch]  # (container spec, restartCount) -> Launch
BACKOFF_START = 1.0  # a kubelet starts at 10 s; shorter here, so a try-it job retries promptly
BACKOFF_MAX = 60.0  # a kubelet's is 300 s
CONFIG_RETRY = 2.0  # seconds between attempts at a container that could not be configured


DEFAULT_GRACE = 30


class Prober(Protocol):
    """Where a pod's probes run and its events go (the node's; I/O happens there)."""

    def check(self, run: ContainerRun, probe: Probe, done: Callable[[bool, str], None]) -> None:
        """Run `probe` against `run`'s current process off the caller's thread, bounded by the
        probe's timeout, and call ``done(ok, message)`` once (from any thread). Never blocks."""
        ...

    def event(self, container: str, kind: str, reason: str, message: str) -> None:
        """Report an Event (kind Normal or Warning) about `container` of the pod. Never blocks."""
        ...


def backoff(restarts: int) -> float:
    """The wait before restart number `restarts`: 1 s, 2 s, 4 s, ... up to a minute."""
    return float(min(BACKOFF_MAX, BACKOFF_START * 2 ** max(0, restarts - 1)))


class PodRun:
    """A pod's containers on this node; `poll` moves them on, `status` says where they are."""

    def __init__(
        self, pod: Obj, launcher: Launcher, pod_ip: str, host_ip: str, prober: Prober
    ) -> None:
        spec, uid = pod["spec"], pod["metadata"]["uid"]
        self.prober = prober
        grace = spec.get("terminationGracePeriodSeconds")
        self.grace = float(DEFAULT_GRACE if grace is None else grace)
        # (container, its run, probe kind, ok, message) from the prober's threads
        self._results: queue.SimpleQueue[tuple[ContainerRun, int, str, bool, str]] = (
            queue.SimpleQueue()
        )
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
        self._take_results(now)
        for run in self.main:
            if run.probe_kill_at is not None and now >= run.probe_kill_at and run.alive:
                run.signal(signal.SIGKILL)
            self._start_if_due(run, now)
        self._start_probes(now)

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
            probes = self._probes_of(run)
            run.start(self.launcher(run.spec, run.restart_count))
            run.probes = ContainerProbes(probes, now) if probes else None
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
            self.prober.event(run.name, "Warning", "Failed", f"Error: {exc}")  # counted, once

    def _probes_of(self, run: ContainerRun) -> list[Probe]:
        """The probes of a container (init containers have none). Raises ConfigError."""
        if run not in self.main:
            return []
        return container_probes(run.spec, f"spec.containers[{self.main.index(run)}]")

    # --- probing -----------------------------------------------------------------------------
    def _start_probes(self, now: float) -> None:
        for run in self.main:
            if run.probes is None or not run.running or not run.alive:
                continue
            for probe in run.probes.due(now):
                self.prober.check(run, probe, self._inbox(run, probe.kind))

    def _inbox(self, run: ContainerRun, kind: str) -> Callable[[bool, str], None]:
        attempt = run.runs

        def done(ok: bool, message: str) -> None:
            self._results.put((run, attempt, kind, ok, message))

        return done

    def _take_results(self, now: float) -> None:
        """Count the probes' results that came in; kill a container whose startup or liveness
        probe failed (its results from an earlier run are dropped)."""
        while True:
            try:
                run, attempt, kind, ok, message = self._results.get_nowait()
            except queue.Empty:
                return
            if run.probes is None or run.runs != attempt or not run.alive:
                continue
            label = run.probes.states[kind].probe.label
            if not ok:
                failed = f"{label} probe failed: {message}"
                self.prober.event(run.name, "Warning", "Unhealthy", failed)
            killed_for = run.probes.record(kind, ok)
            if killed_for is not None:
                self._kill_for(run, killed_for, now)

    def _kill_for(self, run: ContainerRun, probe: Probe, now: float) -> None:
        """SIGTERM now, SIGKILL after the probe's grace (else the pod's), as a kubelet kills a
        container that failed its liveness or startup probe."""
        message = f"Container {run.name} failed {probe.label.lower()} probe"
        if self.policy != "Never":
            message += ", will be restarted"
        self.prober.event(run.name, "Normal", "Killing", message)
        grace = float(probe.grace) if probe.grace is not None else self.grace
        run.probe_killed, run.probe_kill_at = True, now + grace
        run.signal(signal.SIGTERM)

    def _exited(self, run: ContainerRun, ended: Obj, now: float) -> None:
        is_init = run in self.init
        code = ended["exitCode"]
        failed = code != 0 or run.probe_killed
        restarts = not self.terminating and (
            (self.policy == "Always" and not is_init) or (self.policy != "Never" and failed)
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
        ready = bool(self.main) and all(r.ready for r in self.main) and not self.terminating
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
