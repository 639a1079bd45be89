"""TFJob: Chief/Master, PS, Worker, Evaluator; TF_CONFIG in the `tensorflow` container."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import (
    ConditionStatus,
    ConditionType,
    ReplicaSpec,
    RestartPolicy,
    WireEnum,
)
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import (
    FAILED,
    RESTARTING,
    RUNNING,
    SUCCEEDED,
    env_var,
    replica_spec,
    total_replicas,
)


class SuccessPolicy(WireEnum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


class TFJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="tfReplicaSpecs")
    success_policy: SuccessPolicy | None = None
    enable_dynamic_worker: bool | None = None


class TFJob(TrainingJob):
    kind: str = "TFJob"
    spec: TFJobSpec


CHIEF, MASTER, PS, WORKER, EVALUATOR = "Chief", "Master", "PS", "Worker", "Evaluator"
LEADERS = (CHIEF, MASTER)


def _spec(job: TrainingJob) -> TFJobSpec:
    if not isinstance(job.spec, TFJobSpec):
        raise TypeError(f"expected a TFJob, got {job.kind}")
    return job.spec


def _cluster(ctx: ClusterContext) -> dict[str, list[str]]:
    """Every replica's cluster-wide address, keyed by lowercase type, keys sorted as upstream.

    Computed once per plan (every replica's TF_CONFIG holds the same map).
    """
    if "tf.cluster" not in ctx.memo:
        ctx.memo["tf.cluster"] = {
            rtype.lower(): [
                f"{ctx.addressing.host(rtype, i, fqdn=True)}:{ctx.addressing.port(rtype, i)}"
                for i in range(ctx.replicas[rtype])
            ]
            for rtype in sorted(ctx.replicas, key=str.lower)
        }
    cluster: dict[str, list[str]] = ctx.memo["tf.cluster"]
    return cluster


def _sparse_cluster(cluster: dict[str, list[str]], rtype: str, index: int) -> dict[str, Any]:
    """enableDynamicWorker: a worker sees itself and every PS; a PS sees only itself."""
    workers: dict[str, str] = {}
    ps: list[str] = []
    if rtype == PS:
        ps = [cluster["ps"][index]]
    elif rtype == WORKER:
        workers = {str(index): cluster["worker"][index]}
        ps = cluster.get("ps", [])
    return {"worker": workers, "ps": ps}


def tf_config(ctx: ClusterContext, rtype: str, index: int) -> str:
    task = {"type": rtype.lower(), "index": index}
    if _spec(ctx.job).enable_dynamic_worker:
        sparse = {"cluster": _sparse_cluster(_cluster(ctx), rtype, index), "task": task}
        return json.dumps(sparse, separators=(",", ":"))
    # Every replica shares the cluster part: serialise it once per plan, not once per replica.
    if "tf.cluster_json" not in ctx.memo:
        ctx.memo["tf.cluster_json"] = json.dumps(_cluster(ctx), separators=(",", ":"))
    cluster_json: str = ctx.memo["tf.cluster_json"]
    task_json = json.dumps(task, separators=(",", ":"))
    return f'{{"cluster":{cluster_json},"task":{task_json},"environment":"cloud"}}'


def tensorflow_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    # A single-replica job is not distributed: TF must not see a cluster spec at all.
    if total_replicas(ctx.replicas) == 1:
        return []
    return [env_var("TF_CONFIG", tf_config(ctx, rtype, index))]


def tensorflow_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    if any(replicas.get(leader) for leader in LEADERS):
        return rtype in LEADERS
    return rtype == WORKER and index == 0


# Upstream's UpdateJobStatus walks the replica types in this order (unknown types are not read).
STATUS_ORDER = (CHIEF, EVALUATOR, MASTER, PS, WORKER)


def _progress(job: TrainingJob, rtype: str, c: ReplicaCounts, led: bool, worker0_ok: bool) -> str:
    """What `rtype` says about success: Succeeded, Running or "" (nothing)."""
    if led:  # a Chief or Master decides
        if rtype not in LEADERS:
            return ""
        return SUCCEEDED if c.replicas - c.succeeded == 0 else RUNNING if c.active > 0 else ""
    if rtype != WORKER:
        return ""
    # Default policy: worker 0 plays the chief, its clean exit ends the job.
    all_workers = (_spec(job).success_policy or SuccessPolicy.DEFAULT) == SuccessPolicy.ALL_WORKERS
    if c.replicas - c.succeeded == 0 or (worker0_ok and not all_workers):
        return SUCCEEDED
    return RUNNING if c.active > 0 else ""


def _restarting(job: TrainingJob) -> Verdict | None:
    """The Restarting condition this round already holds (upstream puts it back as it was)."""
    for c in job.status.conditions if job.status else []:
        if c.type == ConditionType.RESTARTING and c.status == ConditionStatus.TRUE:
            return Verdict(RESTARTING, c.message or f"TFJob {job.key} is restarting.")
    return None


def _failure(job: TrainingJob, rtype: str, counts: ReplicaCounts) -> Verdict | None:
    restarting = _restarting(job)
    if restarting is not None:
        return restarting
    if _spec(job).enable_dynamic_worker and rtype == WORKER:
        return None  # dynamic workers come and go; losing one does not end the job
    msg = f"TFJob {job.key} has failed because {counts.failed} {rtype} replica(s) failed."
    return Verdict(FAILED, msg, rtype)


def tensorflow_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> list[Verdict]:
    """Upstream's pass over the replica types, one condition after another: a Chief that is
    still active records Running before a Worker's failure ends the job; a later Failed cannot
    undo an earlier one. Where upstream would append Failed after Succeeded in the same pass
    (the chief succeeded, workers failed), the chief decides: the job Succeeded."""
    led = any(r in counts for r in LEADERS)
    verdicts: list[Verdict] = []
    for rtype in (r for r in STATUS_ORDER if r in counts):
        c = counts[rtype]
        state = _progress(job, rtype, c, led, worker0_succeeded)
        if state == SUCCEEDED:
            return [*verdicts, Verdict(SUCCEEDED, f"TFJob {job.key} successfully completed.")]
        if state == RUNNING:
            verdicts.append(Verdict(RUNNING, f"TFJob {job.key} is running."))
        failure = _failure(job, rtype, c) if c.failed > 0 else None
        if failure is not None:
            verdicts.append(failure)
    return verdicts


def tensorflow_validate(job: TrainingJob) -> list[Problem]:
    leaders = [replica_spec(job, r) for r in LEADERS]
    count = sum((s.replicas if s.replicas is not None else 1) for s in leaders if s is not None)
    if count > 1:
        return [Problem("spec.tfReplicaSpecs", "must not have more than 1 Chief or Master role")]
    return []


def tensorflow_default(job: TrainingJob) -> None:
    spec = _spec(job)
    if spec.success_policy is None:
        spec.success_policy = SuccessPolicy.DEFAULT


KIND = Kind(
    kind="TFJob",
    plural="tfjobs",
    job_model=TFJob,
    replica_field="tfReplicaSpecs",
    replica_types=(CHIEF, MASTER, PS, WORKER, EVALUATOR),
    default_container="tensorflow",
    port_name="tfjob-port",
    default_port=2222,
    default_restart_policy=RestartPolicy.NEVER,
    framework="tensorflow",
    env=tensorflow_env,
    is_master_role=tensorflow_is_master,
    primary_types=(CHIEF, MASTER, WORKER),
    status=tensorflow_status,
    env_in_all_containers=False,
    validate=tensorflow_validate,
    default=tensorflow_default,
    restrict_replica_types=False,
)
