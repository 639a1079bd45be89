"""A TrainJob task's job on a backend that stores TrainJobs as such (the kubernetes backend).

A task whose job is a Kubeflow Trainer v2 TrainJob (`@task(task_config=TrainJob(...))`, or a
`TrainingJobCommandTask` of a TrainJob YAML) carries two forms: the planned job (`custom["job"]`,
which the local and Ray backends run) and the TrainJob as written (`custom["trainJob"]`). On a
cluster the TrainJob itself is created, so that it is checked against the cluster's runtimes and
run by whoever runs TrainJobs there. Everything the connector puts on a v1 job's replicas goes
where a TrainJob's author would put it: the command, env and image in `spec.trainer`; Flyte's
labels and annotations on the TrainJob; its service account and pod labels in a `runtimePatches`
entry of manager `trainop.dev/flyte`; the task's timeout in `spec.activeDeadlineSeconds`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from flytekit.models.task import TaskExecutionMetadata

from trainop_core.api import trainjob as v2
from trainop_core.runtimes.policies.base import LAUNCHER
from trainop_core.runtimes.translate import merge_env
from trainop_flyte.replicas import FAIL_ON_ERROR_ENV, REPLICA_INDEX_ENV, REPLICA_TYPE_ENV
from trainop_flyte.spec import Container
from trainop_flyte.trainjob import trainjob_program

TRAINJOB_KEY = "trainJob"
FLYTE_MANAGER = "trainop.dev/flyte"
# A node's index: the label trainop's operator and JobSet both put on a TrainJob's pods.
NODE_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
NODE_TYPE = "Node"  # the planned job's replica type, as the task reads TRAINOP_REPLICA_TYPE


def stores_trainjobs(client: Any) -> bool:
    from trainop_core.backends.base import TrainJobStore

    return isinstance(getattr(client, "backend", None), TrainJobStore)


def cluster_trainjob(
    custom: Mapping[str, Any],
    container: Container | None,
    metadata: TaskExecutionMetadata | None,
    timeout_seconds: int,
) -> dict[str, Any]:
    """The TrainJob to create for one attempt (name and namespace are the caller's). With a
    `container` (a function task) every node runs it, under the policy's launcher if any."""
    job: dict[str, Any] = copy.deepcopy(dict(custom[TRAINJOB_KEY]))
    spec = job.setdefault("spec", {})
    trainer = spec.setdefault("trainer", {})
    env: dict[str, str] = {}
    if container is not None:
        _run(trainer, custom["job"], container)
        env = {**dict(container.env), FAIL_ON_ERROR_ENV: "true"}
        trainer["env"] = merge_env(trainer.get("env") or [], _identity())
    if metadata is not None:
        env.update(dict(metadata.environment_variables or {}))
        _label(job.setdefault("metadata", {}), metadata)
        patch = _pod_patch(metadata)
        if patch:
            spec["runtimePatches"] = [*(spec.get("runtimePatches") or []), patch]
    if env:
        added = [{"name": k, "value": str(v)} for k, v in env.items()]
        trainer["env"] = merge_env(added, trainer.get("env") or [])  # the job's own entries win
    if timeout_seconds > 0:
        spec.setdefault("activeDeadlineSeconds", timeout_seconds)
    return job


def _run(trainer: dict[str, Any], planned: Mapping[str, Any], container: Container) -> None:
    argv = [*container.command, *container.args]  # Flyte puts the whole argv in args
    # trainer.command is what the launcher runs where the policy has one (mpi), else every node
    program = trainjob_program(planned, LAUNCHER, argv) or argv
    trainer["image"] = trainer.get("image") or container.image
    trainer["command"], trainer["args"] = program[:1], program[1:]


def _identity() -> list[dict[str, Any]]:
    label = f"metadata.labels['{NODE_INDEX_LABEL}']"
    return [
        {"name": REPLICA_TYPE_ENV, "value": NODE_TYPE},
        {"name": REPLICA_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": label}}},
    ]


def _label(meta: dict[str, Any], metadata: TaskExecutionMetadata) -> None:
    if metadata.labels:
        meta["labels"] = {**dict(metadata.labels), **(meta.get("labels") or {})}
    if metadata.annotations:
        meta["annotations"] = {**dict(metadata.annotations), **(meta.get("annotations") or {})}


def _pod_patch(metadata: TaskExecutionMetadata) -> dict[str, Any] | None:
    pod: dict[str, Any] = {}
    if metadata.labels:
        pod["metadata"] = {"labels": dict(metadata.labels)}
    if metadata.k8s_service_account:
        pod["spec"] = {"serviceAccountName": metadata.k8s_service_account}
    return v2.pod_patch(FLYTE_MANAGER, pod) if pod else None
