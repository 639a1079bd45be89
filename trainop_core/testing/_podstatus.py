"""The kubelet stand-in's pure status changes: a pod dict in, the same pod with its next status.

No I/O. Each function takes the pod as read from the API server and returns it changed, ready to
be written through ``pods/status``. Timestamps are RFC 3339 seconds, as the API server keeps them.
"""

from __future__ import annotations

import time
from typing import Any

Pod = dict[str, Any]
POD_IP = "127.0.0.1"
TERMINAL = ("Succeeded", "Failed")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def statuses(pod: Pod) -> list[dict[str, Any]]:
    return list(pod.get("status", {}).get("containerStatuses") or [])


def attempt(pod: Pod) -> int:
    """The current attempt: the highest restartCount of the pod's containers."""
    return max((s.get("restartCount", 0) for s in statuses(pod)), default=0)


def is_terminal(pod: Pod) -> bool:
    return pod.get("status", {}).get("phase") in TERMINAL


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) of a status, top level: the keys whose value changed, and
    None for the keys `new` dropped (lists are replaced whole by a merge patch anyway)."""
    patch: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


def accept(pod: Pod) -> Pod:
    """Pending, containers waiting in ContainerCreating (idempotent)."""
    status = pod.setdefault("status", {})
    if status.get("containerStatuses"):
        return pod
    status.update(phase="Pending", hostIP=POD_IP, hostIPs=[{"ip": POD_IP}])
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


def run(pod: Pod) -> Pod:
    """Running: every container that is not running starts; podIP and startTime set."""
    pod = accept(pod)
    status, started = pod["status"], now()
    if is_terminal(pod):
        return pod
    status.update(phase="Running", podIP=POD_IP, podIPs=[{"ip": POD_IP}])
    status.setdefault("startTime", started)
    for cs in status["containerStatuses"]:
        if "running" not in cs["state"]:
            cs.update(state={"running": {"startedAt": started}}, ready=True, started=True)
            cs["containerID"] = _container_id(pod, cs)
    _set_conditions(pod, True)
    return pod


def exit_containers(pod: Pod, container: str | None, code: int, force: bool = False) -> Pod:
    """Running container(s) exit with `code`; the restartPolicy (or `force`) restarts them in
    place, otherwise they stay terminated and the phase settles once all have."""
    policy = pod["spec"].get("restartPolicy", "Always")
    restart = force or policy == "Always" or (policy == "OnFailure" and code != 0)
    ended = now()
    for cs in statuses(pod):
        if (container and cs["name"] != container) or "running" not in cs["state"]:
            continue
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": cs["state"]["running"]["startedAt"],
            "finishedAt": ended,
            "containerID": cs.get("containerID", ""),
        }
        if restart:
            cs["lastState"] = {"terminated": terminated}
            cs["restartCount"] = cs.get("restartCount", 0) + 1
            cs.update(state={"running": {"startedAt": ended}}, ready=True, started=True)
            cs["containerID"] = _container_id(pod, cs)
        else:
            cs.update(state={"terminated": terminated}, ready=False, started=False)
    _settle_phase(pod)
    return pod


def evict(pod: Pod, reason: str, message: str) -> Pod:
    """Failed with `reason`, every container killed (exit 137), whatever the restartPolicy."""
    pod = accept(pod)
    ended = now()
    for cs in statuses(pod):
        if "terminated" not in cs["state"]:
            started = cs["state"].get("running", {}).get("startedAt", ended)
            cs.update(
                ready=False,
                started=False,
                state={
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": started,
                        "finishedAt": ended,
                    }
                },
            )
    pod["status"].update(phase="Failed", reason=reason, message=message)
    _set_conditions(pod, False, "PodFailed")
    return pod


def _container_id(pod: Pod, status: dict[str, Any]) -> str:
    return f"trainop://{pod['metadata']['uid']}/{status['name']}/{status.get('restartCount', 0)}"


def _condition(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now(),
    }
    if reason:
        cond["reason"] = reason
    return cond


def _set_conditions(pod: Pod, ready: bool, reason: str = "") -> None:
    scheduled = pod["status"].get("phase") is not None
    not_ready = "" if ready else reason or "ContainersNotReady"
    pod["status"]["conditions"] = [
        _condition("PodScheduled", scheduled),
        _condition("Initialized", True),
        _condition("ContainersReady", ready, not_ready),
        _condition("Ready", ready, not_ready),
    ]


def _settle_phase(pod: Pod) -> None:
    states = statuses(pod)
    ended = [cs["state"]["terminated"] for cs in states if "terminated" in cs["state"]]
    if states and len(ended) == len(states):
        ok = all(t["exitCode"] == 0 for t in ended)
        pod["status"]["phase"] = "Succeeded" if ok else "Failed"
        _set_conditions(pod, False, "PodCompleted")
    elif ended:
        _set_conditions(pod, False)
