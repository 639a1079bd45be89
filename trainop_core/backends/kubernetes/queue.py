"""Why a job waits in Kueue, read from the Workload Kueue keeps for it.

Kueue holds a job that carries the label ``kueue.x-k8s.io/queue-name`` suspended until its
ClusterQueue has quota. The job itself only says "suspended"; why it waits (e.g. "insufficient
quota for cpu in flavor default, ... > maximum capacity (2)") is on the job's Workload
(``kueue.x-k8s.io/v1beta2``, owned by the job): its ``QuotaReserved`` condition while it waits
for quota, its ``Admitted`` condition while admission checks are pending. Read-only; a cluster
without Kueue has no such API and so no reasons.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.backends.kubernetes.errors import ApiError, translate
from trainop_core.client import is_finished

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
#: The conditions that say why a Workload is not admitted yet, in the order they are decided.
WAITING_CONDITIONS = ("QuotaReserved", "Admitted")


def waits_in_kueue(job: TrainingJob) -> bool:
    """The job is queued for Kueue (it carries the queue label), suspended and not finished."""
    labels = job.metadata.labels or {}
    return (
        bool(labels.get(QUEUE_LABEL))
        and bool(job.spec.run_policy.suspend)
        and (not is_finished(job))
    )


def waiting_reason(workload: dict[str, Any]) -> str:
    """Why `workload` is not admitted ("" once it is): the first waiting condition that is
    False, as "Reason: message"."""
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    for name in WAITING_CONDITIONS:
        found = conditions.get(name)
        if found is not None and found.get("status") == "False":
            message = str(found.get("message") or "").strip()
            reason = str(found.get("reason") or name)
            return f"{reason}: {message}" if message else reason
    if conditions.get("Admitted", {}).get("status") == "True":
        return ""
    return "waiting for Kueue to consider it"


class KueueWorkloads:
    """Reads Kueue's Workloads through one ``CustomObjectsApi`` (made for `api_client`, or the
    given `custom_objects`, anything with its ``list_namespaced_custom_object``)."""

    def __init__(self, api_client: Any = None, *, custom_objects: Any = None) -> None:
        if custom_objects is None:
            from kubernetes import client

            custom_objects = client.CustomObjectsApi(api_client)
        self._api = custom_objects

    def reasons(self, jobs: Iterable[TrainingJob]) -> dict[str, str]:
        """Why each job that waits in Kueue is not admitted, by job uid (one LIST of Workloads
        per namespace concerned). A job Kueue has not made a Workload for yet gets a reason
        saying so. Empty when Kueue is not installed or the caller may not read Workloads (a
        user allowed to list jobs keeps `trainop get`, without the reasons)."""
        waiting = [job for job in jobs if waits_in_kueue(job) and job.metadata.uid]
        reasons: dict[str, str] = {}
        for namespace in sorted({job.namespace for job in waiting}):
            owned = self._by_owner(namespace)
            if owned is None:
                return {}
            for job in waiting:
                if job.namespace == namespace:
                    uid = str(job.metadata.uid)
                    workload = owned.get(uid)
                    reasons[uid] = (
                        waiting_reason(workload) if workload else "no Kueue Workload for it yet"
                    )
        return {uid: reason for uid, reason in reasons.items() if reason}

    def _by_owner(self, namespace: str) -> dict[str, dict[str, Any]] | None:
        """The namespace's Workloads by the uid of the object that owns them; None without Kueue
        or without the right to list them."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"Kueue Workloads in {namespace}"
        try:
            page = self._api.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads"
            )
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise translate(exc, what=what) from exc
        except HTTPError as exc:  # unreachable server, reset or timed-out connection
            raise ApiError(f"{what}: {exc}") from exc
        owned: dict[str, dict[str, Any]] = {}
        for workload in page.get("items") or []:
            for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
                owned[str(owner.get("uid"))] = workload
        return owned
