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
    strongest,
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


def _success(job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_ok: bool) -> Verdict:
    done = Verdict(SUCCEEDED, f"TFJob {job.key} successfully completed.")
    running = Verdict(RUNNING, f"TFJob {job.key} is running.")
    leaders = [counts[r] for r in LEADERS if r in counts]
    if leaders:
        if all(c.replicas - c.succeeded == 0 for c in leaders):
            return done
        return running if any(c.active > 0 for c in leaders) else Verdict("")
    worker = counts.get(WORKER)
    if worker is None:
        return Verdict("")
    policy = _spec(job).success_policy or SuccessPolicy.DEFAULT
    # Default policy: worker 0 plays the chief, its clean exit ends the job.
    if worker.replicas - worker.succeeded == 0 or (
        worker0_ok and policy != SuccessPolicy.ALL_WORKERS
    ):
        return done
    return running if worker.active > 0 else Verdict("")


def _is_restarting(job: TrainingJob) -> bool:
    conditions = job.status.conditions if job.status else []
    return any(
        c.type == ConditionType.RESTARTING and c.status == ConditionStatus.TRUE for c in conditions
    )


def _failure(job: TrainingJob, rtype: str, counts: ReplicaCounts) -> Verdict:
    if _is_restarting(job):
        return Verdict(RESTARTING, f"TFJob {job.key} is restarting.", rtype)
    if _spec(job).enable_dynamic_worker and rtype == WORKER:
        return Verdict("")  # dynamic workers come and go; losing one does not end the job
    msg = f"TFJob {job.key} has failed because {counts.failed} {rtype} replica(s) failed."
    return Verdict(FAILED, msg, rtype)


def tensorflow_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    verdicts = [_success(job, counts, worker0_succeeded)]
    verdicts += [_failure(job, r, c) for r, c in counts.items() if c.failed > 0]
    return strongest(verdicts)


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
