"""The one internal kind every TrainJob is planned as: a single replica type, the trainer nodes.

A TrainJob and its runtime become a `PlannedTrainJob` (`translate.py`); the planner then runs it
as any v1 job. The ML policy named in the planned spec supplies the env contract; the pods get
the JobSet labels the Kubeflow SDK selects and reads them by (see `SDK_LABELS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from trainop_core.api import trainjob as v2
from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import worker_style_status
from trainop_core.runtimes.policies.base import NODE
from trainop_core.runtimes.policies.table import builtin_policies

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
PORT_NAME = "node-port"


class PlannedTrainJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="replicaSpecs")
    ml_policy: str = "plain"
    num_proc_per_node: int | Literal["auto"] = 1


class PlannedTrainJob(TrainingJob):
    kind: str = v2.TRAINJOB
    spec: PlannedTrainJobSpec


def _policy_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    spec = ctx.job.spec
    assert isinstance(spec, PlannedTrainJobSpec)  # reason: this kind's job model guarantees it
    return builtin_policies()[spec.ml_policy].env(ctx, index, spec.num_proc_per_node)


def _is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return index == 0


def _status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    # A JobSet's default success policy: every node has succeeded.
    return worker_style_status(job, counts, leader=NODE, name=job.key)


def _validate(job: TrainingJob) -> list[Problem]:
    policy = getattr(job.spec, "ml_policy", "")
    known = builtin_policies()
    if policy in known:
        return []
    return [Problem("spec.mlPolicy", f"expected one of {', '.join(known)}, got {policy!r}")]


def _sdk_labels(ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
    """The labels a JobSet's pod carries that the Kubeflow SDK lists and reads pods by."""
    labels = pod["metadata"].setdefault("labels", {})
    labels.update(sdk_labels(ctx.job.name, index))


def sdk_labels(job_name: str, index: int) -> dict[str, str]:
    return {
        JOBSET_NAME_LABEL: job_name,
        REPLICATED_JOB_LABEL: v2.NODE,
        JOB_INDEX_LABEL: "0",
        COMPLETION_INDEX_LABEL: str(index),
        v2.ANCESTOR_LABEL: v2.TRAINER_STEP,
    }


KIND = Kind(
    kind=v2.TRAINJOB,
    plural="trainjobs",
    job_model=PlannedTrainJob,
    replica_field="replicaSpecs",
    replica_types=(NODE,),
    default_container=v2.NODE,
    port_name=PORT_NAME,
    default_port=29500,
    default_restart_policy=RestartPolicy.NEVER,
    framework="trainjob",
    env=_policy_env,
    env_in_all_containers=False,  # Trainer injects the contract into the "node" container only
    is_master_role=_is_master,
    status=_status,
    validate=_validate,
    decorate_pod=_sdk_labels,
    primary_types=(NODE,),
)
