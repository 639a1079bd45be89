"""A kubelet stand-in: moves pods through their lifecycle via the ``status`` subresource.

Pods are observed in-process (a store listener) and written through
``Store.mutate(..., subresource="status")``, so every transition is a real MODIFIED event
for watchers. Automatic behaviour comes from :class:`Rule` s (first match wins); pods that
match no rule stay Pending until the test drives them with :meth:`Kubelet.run`,
:meth:`Kubelet.terminate`, :meth:`Kubelet.restart_container` or :meth:`Kubelet.evict`.

Restart policy is honoured when a container exits: ``Always`` (any exit) and ``OnFailure``
(non-zero exit) restart it in place (``restartCount`` + 1, ``lastState.terminated``, pod stays
Running); otherwise the container stays terminated and, once all are, the pod becomes
Succeeded (all exit 0) or Failed. Deleted pods are removed by the server at once
(grace periods are not emulated).
"""

from __future__ import annotations

import fnmatch
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .apiserver.errors import ApiError
from .apiserver.events import Event
from .apiserver.meta import now_iso

if TYPE_CHECKING:
    from .apiserver.server import ApiServer

Pod = dict[str, Any]
log = logging.getLogger(__name__)
POD_IP = "127.0.0.1"


@dataclass(frozen=True)
class Rule:
    """Automatic behaviour for pods whose name matches ``pattern`` (``ns/name`` if it has "/").

    ``exit_code`` may be a sequence: attempt *n* (restartCount *n*) exits with the *n*-th
    code, the last one repeating. ``run_seconds=None`` keeps containers running until the
    test terminates them. ``log`` is appended to each container's log when it starts.
    """

    pattern: str = "*"
    start_seconds: float = 0.0
    run_seconds: float | None = 0.0
    exit_code: int | Sequence[int] = 0
    log: str = ""

    def matches(self, namespace: str, name: str) -> bool:
        subject = f"{namespace}/{name}" if "/" in self.pattern else name
        return fnmatch.fnmatchcase(subject, self.pattern)

    def code_for(self, attempt: int) -> int:
        if isinstance(self.exit_code, int):
            return self.exit_code
        codes = list(self.exit_code)
        return codes[min(attempt, len(codes) - 1)]


class Kubelet:
    """Drives pod status for one :class:`ApiServer`; start/stop or use as a context manager."""

    def __init__(self, server: ApiServer, rules: Sequence[Rule] = ()) -> None:
        self._server = server
        self._store = server.store
        self._pods = server.store.resource("pods")
        self.rules = list(rules)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str, str, str, str]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Kubelet:
        with self._store.lock:
            self._store.subscribe(self._on_event)
            for pod in self._store.list(self._pods, None).items:
                self._schedule(0.0, "accept", pod)
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._store.unsubscribe(self._on_event)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Kubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --------------------------------------------------------- test driving
    def run(self, namespace: str, name: str) -> Pod:
        """Start all containers: phase Running, ready, podIP and startTime set."""
        pod = self._write(namespace, name, _run)
        rule = self._rule(namespace, name)
        if rule and rule.log:
            for container in pod["spec"]["containers"]:
                self._server.append_pod_log(namespace, name, rule.log, container["name"])
        return pod

    def terminate(
        self, namespace: str, name: str, exit_code: int = 0, container: str | None = None
    ) -> Pod:
        """Running container(s) exit with ``exit_code``; restartPolicy decides what follows."""
        return self._write(namespace, name, lambda p: _exit(p, container, exit_code))

    def restart_container(
        self, namespace: str, name: str, container: str | None = None, exit_code: int = 1
    ) -> Pod:
        """Restart in place whatever the policy (as after a liveness failure)."""
        return self._write(namespace, name, lambda p: _exit(p, container, exit_code, force=True))

    def evict(self, namespace: str, name: str, reason: str = "Evicted", message: str = "") -> Pod:
        """Fail the whole pod regardless of restartPolicy (node pressure, preemption)."""
        return self._write(namespace, name, lambda p: _evict(p, reason, message))

    # ------------------------------------------------------------ automatic
    def _rule(self, namespace: str, name: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(namespace, name)), None)

    def _on_event(self, event: Event) -> None:
        if event.rkey == ("", "pods") and event.type == "ADDED":
            self._schedule(0.0, "accept", event.obj)

    def _schedule(self, delay: float, action: str, pod: Pod) -> None:
        meta = pod["metadata"]
        due = time.monotonic() + delay
        entry = (due, next(self._seq), action, meta["namespace"], meta["name"], meta["uid"])
        with self._cond:
            heapq.heappush(self._heap, entry)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                _, _, action, namespace, name, uid = heapq.heappop(self._heap)
            try:
                self._act(action, namespace, name, uid)
            except ApiError as err:
                if err.code not in (404, 409):
                    log.warning("kubelet %s %s/%s failed: %s", action, namespace, name, err)

    def _act(self, action: str, namespace: str, name: str, uid: str) -> None:
        current = self._store.find(self._pods, namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            return  # deleted, or re-created under the same name: a new pod's schedule
        rule = self._rule(namespace, name)
        if action == "accept":
            pod = self._write(namespace, name, _accept)
            if rule is not None:
                self._schedule(rule.start_seconds, "run", pod)
        elif action == "run" and rule is not None:
            pod = self.run(namespace, name)
            if rule.run_seconds is not None:
                self._schedule(rule.run_seconds, "exit", pod)
        elif action == "exit" and rule is not None:
            attempt = max((s.get("restartCount", 0) for s in _statuses(current)), default=0)
            pod = self.terminate(namespace, name, rule.code_for(attempt))
            if pod["status"].get("phase") == "Running" and rule.run_seconds is not None:
                self._schedule(rule.run_seconds, "exit", pod)

    def _write(self, namespace: str, name: str, change: Callable[[Pod], Pod]) -> Pod:
        return self._store.mutate(self._pods, namespace, name, change, subresource="status")


# ------------------------------------------------------- pure status changes
def _statuses(pod: Pod) -> list[dict[str, Any]]:
    return list(pod.get("status", {}).get("containerStatuses") or [])


def _condition(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
    cond = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now_iso(),
    }
    if reason:
        cond["reason"] = reason
    return cond


def _set_conditions(pod: Pod, ready: bool, reason: str = "") -> None:
    scheduled = pod["status"].get("phase") is not None
    pod["status"]["conditions"] = [
        _condition("PodScheduled", scheduled),
        _condition("Initialized", True),
        _condition("ContainersReady", ready, "" if ready else reason or "ContainersNotReady"),
        _condition("Ready", ready, "" if ready else reason or "ContainersNotReady"),
    ]


def _accept(pod: Pod) -> Pod:
    status = pod.setdefault("status", {})
    if status.get("containerStatuses"):
        return pod
    status.update(phase="Pending", hostIP=POD_IP)
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "lastState": {},
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }
        for c in pod["spec"]["containers"]
    ]
    _set_conditions(pod, False)
    return pod


def _container_id(pod: Pod, status: dict[str, Any]) -> str:
    return f"fake://{pod['metadata']['uid']}/{status['name']}/{status.get('restartCount', 0)}"


def _run(pod: Pod) -> Pod:
    pod = _accept(pod)
    status, now = pod["status"], now_iso()
    if status.get("phase") in ("Succeeded", "Failed"):
        return pod
    status.update(phase="Running", podIP=POD_IP, podIPs=[{"ip": POD_IP}])
    status.setdefault("startTime", now)
    for cs in status["containerStatuses"]:
        if "running" not in cs["state"]:
            cs.update(state={"running": {"startedAt": now}}, ready=True, started=True)
            cs["containerID"] = _container_id(pod, cs)
    _set_conditions(pod, True)
    return pod


def _exit(pod: Pod, container: str | None, code: int, force: bool = False) -> Pod:
    policy = pod["spec"].get("restartPolicy", "Always")
    restart = force or policy == "Always" or (policy == "OnFailure" and code != 0)
    now = now_iso()
    for cs in _statuses(pod):
        if (container and cs["name"] != container) or "running" not in cs["state"]:
            continue
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": cs["state"]["running"]["startedAt"],
            "finishedAt": now,
            "containerID": cs.get("containerID", ""),
        }
        if restart:
            cs["lastState"] = {"terminated": terminated}
            cs["restartCount"] = cs.get("restartCount", 0) + 1
            cs.update(state={"running": {"startedAt": now}}, ready=True, started=True)
            cs["containerID"] = _container_id(pod, cs)
        else:
            cs.update(state={"terminated": terminated}, ready=False, started=False)
    _settle_phase(pod)
    return pod


def _settle_phase(pod: Pod) -> None:
    statuses = _statuses(pod)
    ended = [cs["state"]["terminated"] for cs in statuses if "terminated" in cs["state"]]
    if statuses and len(ended) == len(statuses):
        ok = all(t["exitCode"] == 0 for t in ended)
        pod["status"]["phase"] = "Succeeded" if ok else "Failed"
        _set_conditions(pod, False, "PodCompleted")
    elif ended:
        _set_conditions(pod, False)


def _evict(pod: Pod, reason: str, message: str) -> Pod:
    pod = _accept(pod)
    now = now_iso()
    for cs in _statuses(pod):
        if "terminated" not in cs["state"]:
            started = cs["state"].get("running", {}).get("startedAt", now)
            cs.update(
                ready=False,
                started=False,
                state={
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": started,
                        "finishedAt": now,
                    }
                },
            )
    pod["status"].update(phase="Failed", reason=reason, message=message)
    _set_conditions(pod, False, "PodFailed")
    return pod
