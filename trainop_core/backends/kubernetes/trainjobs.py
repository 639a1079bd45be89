"""Kubeflow Trainer v2 TrainJobs on a cluster, for the kubernetes backend.

A TrainJob is checked on the client as everywhere else (`runtimes.prepare.prepare_trainjob`), but
against the runtimes the cluster holds (its ClusterTrainingRuntimes and the TrainJob namespace's
TrainingRuntimes): whoever runs it there (trainop's operator with `--enable-scheme TrainJob`, or
Trainer itself) finds its runtime there. It is stored as written, as
`trainer.kubeflow.org/v1alpha1`. Read back, it is shown as the planned job its runtime makes of it,
with the status trainop's operator records (`status.plannerStatus`), else the one read from
Trainer's own conditions (Complete, Failed, Suspended); `trainop get -o yaml` prints it as stored.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.load import Document, client_view
from trainop_core.api.trainjob_validation import is_v2, parse_v2
from trainop_core.api.types import SERVER_SET, JobStatus, ObjectMeta, ReplicaSpec, RunPolicy
from trainop_core.backends.kubernetes.errors import ApiError, translate
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.base import Kind
from trainop_core.progress import carry
from trainop_core.runtimes.catalog import RuntimeCatalog
from trainop_core.runtimes.kind import KIND, PlannedTrainJob, PlannedTrainJobSpec
from trainop_core.runtimes.policies.base import NODE
from trainop_core.runtimes.status import decode_status

log = logging.getLogger(__name__)
TRAINJOB_KIND = KIND
RUNTIME_PLURALS = {
    v2.CLUSTER_TRAINING_RUNTIME: "clustertrainingruntimes",
    v2.TRAINING_RUNTIME: "trainingruntimes",
}
#: Trainer's conditions that end a TrainJob, and the planner's condition each stands for.
_TRAINER_CONDITIONS = {"Complete": "Succeeded", "Failed": "Failed", "Suspended": "Suspended"}
_ENDINGS = ("Complete", "Failed")


def is_trainjob(kind: Kind) -> bool:
    return kind.kind == TRAINJOB_KIND.kind


def trainjob_finished(obj: Mapping[str, Any]) -> bool:
    """Whether a TrainJob (as the server returned it) holds Trainer's Complete or Failed."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") in _ENDINGS and c.get("status") == "True" for c in conditions)


def is_trainjob_object(obj: Mapping[str, Any]) -> bool:
    return is_v2(obj) and obj.get("kind") == v2.TRAINJOB


class ClusterRuntimes:
    """The training runtimes a cluster holds, read through one `CustomObjectsApi`."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)

    def catalog(self, namespace: str) -> RuntimeCatalog:
        """Every ClusterTrainingRuntime, and the TrainingRuntimes of `namespace` (two LISTs).
        None when the cluster does not serve trainer.kubeflow.org (the catalog is then empty);
        a runtime trainop cannot read is left out (a TrainJob naming it is told it is missing),
        as the operator does."""
        objects = self._list(v2.CLUSTER_TRAINING_RUNTIME, None) + self._list(
            v2.TRAINING_RUNTIME, namespace
        )
        runtimes: list[v2.TrainingRuntime] = []
        for obj in objects:
            try:
                runtime = parse_v2(client_view(obj))
            except InvalidJobError as exc:
                name = (obj.get("metadata") or {}).get("name")
                log.info("runtime %s %s is invalid: %s", obj.get("kind"), name, exc)
                continue
            if isinstance(runtime, v2.TrainingRuntime):
                runtimes.append(runtime)
        return RuntimeCatalog(tuple(runtimes))

    def _list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        plural = RUNTIME_PLURALS[kind]
        try:
            if namespace is None:
                page = self._api.list_cluster_custom_object(v2.GROUP, v2.VERSION, plural)
            else:
                page = self._api.list_namespaced_custom_object(
                    v2.GROUP, v2.VERSION, namespace, plural
                )
        except ApiException as exc:
            if exc.status == 404:  # Trainer's CRDs are not installed: no runtimes
                return []
            raise translate(exc, what=plural) from exc
        except HTTPError as exc:
            raise ApiError(f"{plural}: {exc}") from exc
        return [dict(item, kind=kind) for item in page.get("items") or []]


def trainjob_body(data: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The TrainJob to POST, as its author wrote it: in `namespace`, without status or
    server-set fields."""
    body = copy.deepcopy(dict(data))
    body["apiVersion"], body["kind"] = v2.API_VERSION, v2.TRAINJOB
    return for_create(body, namespace)


def for_create(body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """`body` (changed in place) made ready to POST to `namespace`: no status, no server-set
    metadata. Every kind's create goes through it."""
    body.pop("status", None)
    metadata = body.setdefault("metadata", {})
    metadata["namespace"] = namespace
    for field in SERVER_SET:
        metadata.pop(field, None)
    return body


def planned_view(obj: Mapping[str, Any], catalog: RuntimeCatalog | None) -> PlannedTrainJob:
    """The TrainJob as the planned job its runtime makes of it (replicas, pods' containers);
    without its runtime (deleted since, or not readable) the nodes it names, one container."""
    from trainop_core.runtimes.prepare import prepare_trainjob

    job: PlannedTrainJob | None = None
    if catalog is not None:
        try:
            _, job = prepare_trainjob(Document(client_view(obj), ""), catalog)
        except InvalidJobError:
            job = None
    if job is None:
        job = _bare_view(obj)
    job.status = planner_status(obj.get("status"))
    carry(job, (obj.get("status") or {}).get("trainerStatus"))  # Trainer's or trainop's
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    job.trainjob = {**obj, "metadata": meta}  # as stored, status and all
    return job


def planner_status(status: Mapping[str, Any] | None) -> JobStatus | None:
    """The planner's status trainop's operator records; else one read from Trainer's
    conditions (a TrainJob Trainer runs); None before any."""
    status = status or {}
    recorded = decode_status(dict(status))
    if recorded is not None:
        return recorded
    conditions = [
        {
            "type": _TRAINER_CONDITIONS[c["type"]],
            "status": c.get("status", "Unknown"),
            "reason": c.get("reason"),
            "message": c.get("message"),
            "lastTransitionTime": c.get("lastTransitionTime"),
        }
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") in _TRAINER_CONDITIONS
    ]
    return JobStatus.model_validate({"conditions": conditions}) if conditions else None


def _bare_view(obj: Mapping[str, Any]) -> PlannedTrainJob:
    meta = client_view(obj)["metadata"]
    spec = obj.get("spec") or {}
    trainer = spec.get("trainer") or {}
    nodes = trainer.get("numNodes")
    container = {"name": v2.NODE, "image": str(trainer.get("image") or "")}
    return PlannedTrainJob(
        metadata=ObjectMeta.model_validate(meta),
        spec=PlannedTrainJobSpec(
            replica_specs={
                NODE: ReplicaSpec(
                    replicas=nodes if isinstance(nodes, int) and nodes >= 0 else 1,
                    template={"spec": {"containers": [container]}},
                )
            },
            run_policy=RunPolicy(suspend=bool(spec.get("suspend"))),
        ),
    )
