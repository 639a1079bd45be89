"""MXJob (alias MXNetJob): Scheduler, Server, Worker (+ tuning roles); DMLC_* env and MX_CONFIG."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy, WireEnum
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import (
    RUNNING,
    SUCCEEDED,
    env_var,
    failure_verdict,
    replica_spec,
    strongest,
)


class JobMode(WireEnum):
    TRAIN = "MXTrain"
    TUNE = "MXTune"


class MXJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="mxReplicaSpecs")
    job_mode: JobMode | None = None


class MXJob(TrainingJob):
    kind: str = "MXJob"
    spec: MXJobSpec


SCHEDULER, SERVER, WORKER = "Scheduler", "Server", "Worker"
TUNER_KEY_ANNOTATION = "tuner-server-key"


def _labels(job: TrainingJob, replicas: Mapping[str, int]) -> dict[str, str]:
    labels = {}
    for rtype in replicas:
        spec = replica_spec(job, rtype)
        annotations = (spec.template.get("metadata") or {}).get("annotations") or {} if spec else {}
        labels[rtype.lower()] = str(annotations.get(TUNER_KEY_ANNOTATION, ""))
    return labels


def _shared_config(ctx: ClusterContext) -> str:
    """MX_CONFIG's cluster and labels parts: the same for every replica, built once per plan."""
    if "mxnet.shared" not in ctx.memo:
        cluster = {
            rt.lower(): [
                {"url": ctx.addressing.host(rt, i), "port": ctx.addressing.port(rt, i)}
                for i in range(n)
            ]
            for rt, n in sorted(ctx.replicas.items(), key=lambda item: item[0].lower())
        }
        labels = dict(sorted(_labels(ctx.job, ctx.replicas).items()))
        compact = (",", ":")
        shared = f'"cluster":{json.dumps(cluster, separators=compact)},'
        ctx.memo["mxnet.shared"] = shared + f'"labels":{json.dumps(labels, separators=compact)}'
    text: str = ctx.memo["mxnet.shared"]
    return text


def mx_config(ctx: ClusterContext, rtype: str, index: int) -> str:
    task = json.dumps({"type": rtype.lower(), "index": index}, separators=(",", ":"))
    return f'{{{_shared_config(ctx)},"task":{task}}}'


def mxnet_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    env = [env_var("MX_CONFIG", mx_config(ctx, rtype, index))]
    if ctx.replicas.get(SCHEDULER):
        env.append(env_var("DMLC_PS_ROOT_PORT", ctx.addressing.port(SCHEDULER, 0)))
        env.append(env_var("DMLC_PS_ROOT_URI", ctx.addressing.host(SCHEDULER, 0)))
    env += [
        env_var("DMLC_NUM_SERVER", ctx.replicas.get(SERVER, 0)),
        env_var("DMLC_NUM_WORKER", ctx.replicas.get(WORKER, 0)),
        env_var("DMLC_ROLE", rtype.lower()),
        env_var("DMLC_USE_KUBERNETES", 1),
    ]
    if rtype == WORKER:
        env.append(env_var("DMLC_WORKER_ID", index))  # BytePS reads it
    return env


def mxnet_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    # Upstream quirk kept on purpose: the Server replicas carry job-role=master.
    return rtype == SERVER


def _single_worker(counts: Mapping[str, ReplicaCounts]) -> bool:
    worker = counts.get(WORKER)
    others = [counts[r] for r in (SCHEDULER, SERVER) if r in counts and counts[r].replicas]
    return worker is not None and worker.replicas == 1 and not others


def mxnet_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    leader = WORKER if _single_worker(counts) else SCHEDULER
    verdicts = []
    lead = counts.get(leader)
    if lead is not None and lead.replicas - lead.succeeded == 0:
        verdicts.append(Verdict(SUCCEEDED, f"MXJob {job.name} is successfully completed.", leader))
    elif lead is not None and lead.active > 0:
        verdicts.append(Verdict(RUNNING, f"MXJob {job.name} is running.", leader))
    for rtype, c in counts.items():
        if c.failed > 0:
            restart = c.restart_policy == RestartPolicy.EXIT_CODE
            verdicts.append(failure_verdict("MXJob", job.name, rtype, c, restart=restart))
    return strongest(verdicts)


def mxnet_validate(job: TrainingJob) -> list[Problem]:
    scheduler = replica_spec(job, SCHEDULER)
    if scheduler is not None and (scheduler.replicas or 0) > 1:
        return [Problem("spec.mxReplicaSpecs.Scheduler.replicas", "must not be more than 1")]
    return []


KIND = Kind(
    kind="MXJob",
    plural="mxjobs",
    job_model=MXJob,
    replica_field="mxReplicaSpecs",
    replica_types=(SCHEDULER, SERVER, WORKER, "TunerTracker", "TunerServer", "Tuner"),
    default_container="mxnet",
    port_name="mxjob-port",
    default_port=9091,
    default_restart_policy=RestartPolicy.NEVER,
    framework="mxnet",
    env=mxnet_env,
    is_master_role=mxnet_is_master,
    primary_types=(WORKER,),  # kvstore workers train; Servers only hold parameters
    deprecation=(
        "MXJob is deprecated: the Kubeflow training operator deprecated it in v1.8 and removed "
        "it in v1.9 (kubeflow/training-operator#1996)"
    ),
    status=mxnet_status,
    validate=mxnet_validate,
    aliases=("MXNetJob",),
)
