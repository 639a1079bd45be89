"""Translate cached pods, services and PodGroups (raw dicts) into the planner's `Observed`.

Only children whose *controller* ownerReference names the job's uid belong to it; the replica type
and index come from the labels the planner put on them.
"""

from __future__ import annotations

from typing import Any

from trainop_core.kinds.base import Kind
from trainop_core.planner.types import Observed, ObservedPod, ObservedService

Obj = dict[str, Any]

LABEL_PREFIX = "training.kubeflow.org/"
JOB_NAME_LABEL = f"{LABEL_PREFIX}job-name"
OPERATOR_NAME_LABEL = f"{LABEL_PREFIX}operator-name"
REPLICA_TYPE_LABEL = f"{LABEL_PREFIX}replica-type"
REPLICA_INDEX_LABEL = f"{LABEL_PREFIX}replica-index"


CACHED_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
    "deletionTimestamp", "creationTimestamp",
)  # fmt: skip
CACHED_POD_STATUS = ("phase", "reason", "message", "containerStatuses")


def cached_child(obj: Obj) -> Obj:
    """What the shared caches keep of a pod or service: what `observe`, the owner index and the
    event handlers read (metadata, a pod's phase and container states), and nothing else, as a
    controller-runtime cache transform would. A pod's spec (env, init containers, volumes) is
    most of its size, and the operator never reads it back."""
    meta = obj.get("metadata") or {}
    kept: Obj = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in CACHED_METADATA if k in meta},
    }
    status = obj.get("status")
    if isinstance(status, dict) and "phase" in status:  # a pod (a service has no phase)
        kept["status"] = {k: status[k] for k in CACHED_POD_STATUS if k in status}
    return kept


def controller_ref(obj: Obj) -> Obj | None:
    """The ownerReference with `controller: true`, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_index(obj: Obj) -> list[str]:
    """Index function: `<namespace>/<controller owner uid>` (empty when not controlled)."""
    ref = controller_ref(obj)
    if ref is None or not ref.get("uid"):
        return []
    return [f"{obj.get('metadata', {}).get('namespace', '')}/{ref['uid']}"]


def _replica(obj: Obj, kind: Kind) -> tuple[str, int] | None:
    labels = obj.get("metadata", {}).get("labels") or {}
    rtype, index = labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL)
    if not rtype or index is None or not str(index).isdigit():
        return None
    return kind.canonical_replica_type(rtype), int(index)


def observe_pod(pod: Obj, kind: Kind) -> ObservedPod | None:
    replica = _replica(pod, kind)
    if replica is None:
        return None
    meta, status = pod.get("metadata", {}), pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    terminated = _terminated(statuses, kind.default_container)
    return ObservedPod(
        name=str(meta.get("name", "")),
        replica_type=replica[0],
        index=replica[1],
        phase=str(status.get("phase") or "Pending"),
        exit_code=terminated.get("exitCode") if terminated else None,
        restart_count=sum(int(s.get("restartCount") or 0) for s in statuses),
        deleting=bool(meta.get("deletionTimestamp")),
        reason=str((terminated or {}).get("reason") or status.get("reason") or ""),
        message=str((terminated or {}).get("message") or status.get("message") or ""),
        uid=str(meta.get("uid", "")),
    )


def _terminated(statuses: list[Obj], container: str) -> Obj | None:
    for cs in statuses:
        if cs.get("name") == container:
            terminated = (cs.get("state") or {}).get("terminated")
            return dict(terminated) if terminated else None
    return None


def observe_service(service: Obj, kind: Kind) -> ObservedService | None:
    replica = _replica(service, kind)
    if replica is None:
        return None
    return ObservedService(str(service["metadata"].get("name", "")), replica[0], replica[1])


def observe(pods: list[Obj], services: list[Obj], pod_group: Obj | None, kind: Kind) -> Observed:
    observed_pods = (observe_pod(p, kind) for p in pods)
    observed_services = (observe_service(s, kind) for s in services)
    phase = (pod_group or {}).get("status", {}).get("phase") if pod_group else None
    return Observed(
        pods=tuple(p for p in observed_pods if p is not None),
        services=tuple(s for s in observed_services if s is not None),
        pod_group_phase=str(phase) if phase else None,
    )
