"""PyTorchJob: Master + Worker, torchrun's PET_* env, elastic policy."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ApiModel, NonNegInt, ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import (
    default_elastic_bounds,
    env_var,
    exactly_one,
    replica_spec,
    spec_path,
    total_replicas,
    worker_style_status,
)


class RDZVConf(ApiModel):
    key: str
    value: str


class ElasticPolicy(ApiModel):
    min_replicas: NonNegInt | None = None
    max_replicas: NonNegInt | None = None
    rdzv_backend: str | None = None
    rdzv_port: NonNegInt | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RDZVConf] | None = None
    standalone: bool | None = None
    n_proc_per_node: NonNegInt | None = Field(default=None, alias="nProcPerNode")
    max_restarts: NonNegInt | None = None
    metrics: list[dict[str, object]] | None = None


class PyTorchJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="pytorchReplicaSpecs")
    elastic_policy: ElasticPolicy | None = None
    nproc_per_node: str | None = None


class PyTorchJob(TrainingJob):
    kind: str = "PyTorchJob"
    spec: PyTorchJobSpec


MASTER = "Master"
WORKER = "Worker"
FIELD = "pytorchReplicaSpecs"
NPROC_WORDS = ("auto", "cpu", "gpu")
# Option keys a backend may set in PlanOptions.kind_options (upstream's operator flags).
INIT_IMAGE_OPTION = "pytorch.init_container_image"
INIT_TRIES_OPTION = "pytorch.init_container_max_tries"


def _spec(job: TrainingJob) -> PyTorchJobSpec:
    if not isinstance(job.spec, PyTorchJobSpec):
        raise TypeError(f"expected a PyTorchJob, got {job.kind}")
    return job.spec


def _nproc_int(spec: PyTorchJobSpec) -> int:
    """WORLD_SIZE multiplies by an integer nprocPerNode only; auto/cpu/gpu count as 1 (upstream)."""
    value = spec.nproc_per_node or ""
    return int(value) if _is_count(value) else 1


def _is_count(value: str) -> bool:
    """ASCII digits that fit an int32 ("²" is a digit to str.isdigit, and int() refuses it)."""
    return value.isascii() and value.isdigit() and len(value) <= 10 and int(value) < 2**31


def _master_env(ctx: ClusterContext, spec: PyTorchJobSpec, rtype: str, index: int) -> list[Any]:
    port = ctx.addressing.port(MASTER, 0)
    addr = ctx.addressing.host(MASTER, 0)
    rank = index if rtype == MASTER else index + ctx.replicas.get(MASTER, 0)
    return [
        env_var("MASTER_PORT", port),
        env_var("PET_MASTER_PORT", port),
        env_var("MASTER_ADDR", addr),
        env_var("PET_MASTER_ADDR", addr),
        env_var("WORLD_SIZE", total_replicas(ctx.replicas) * _nproc_int(spec)),
        # Node rank, not process rank: torchrun derives the process ranks itself.
        env_var("RANK", rank),
        env_var("PET_NODE_RANK", rank),
    ]


def _elastic_env(ctx: ClusterContext, policy: ElasticPolicy) -> list[dict[str, Any]]:
    host = policy.rdzv_host or ctx.addressing.host(WORKER, 0)
    port = policy.rdzv_port if policy.rdzv_port is not None else ctx.addressing.port(WORKER, 0)
    env = [
        env_var("PET_RDZV_BACKEND", policy.rdzv_backend or "c10d"),
        env_var("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        env_var("PET_NNODES", f"{policy.min_replicas}:{policy.max_replicas}"),
    ]
    if policy.rdzv_id:
        env.append(env_var("PET_RDZV_ID", policy.rdzv_id))
    if policy.rdzv_conf:
        env.append(
            env_var("PET_RDZV_CONF", ",".join(f"{c.key}={c.value}" for c in policy.rdzv_conf))
        )
    if policy.max_restarts is not None:
        env.append(env_var("PET_MAX_RESTARTS", policy.max_restarts))
    if policy.standalone:
        env.append(env_var("PET_STANDALONE", ""))
    return env


def pytorch_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    spec = _spec(ctx.job)
    env = [env_var("PYTHONUNBUFFERED", "1")]
    if ctx.replicas.get(MASTER):
        # Worker-only jobs get no MASTER_ADDR/RANK/WORLD_SIZE, as upstream (issue #1991).
        env += _master_env(ctx, spec, rtype, index)
    deprecated = spec.elastic_policy.n_proc_per_node if spec.elastic_policy else None
    nproc = spec.nproc_per_node if spec.nproc_per_node is not None else deprecated
    if nproc is not None:
        env.append(env_var("PET_NPROC_PER_NODE", nproc))
    if spec.elastic_policy is None:
        env.append(env_var("PET_NNODES", total_replicas(ctx.replicas)))
    else:
        env += _elastic_env(ctx, spec.elastic_policy)
    return env


def pytorch_is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    if replicas.get(MASTER):
        return rtype == MASTER
    return rtype == WORKER and index == 0


def pytorch_status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict:
    if MASTER in counts:
        return worker_style_status(job, counts, leader=MASTER, name=job.name)
    elastic = _spec(job).elastic_policy is not None
    return worker_style_status(
        job,
        counts,
        leader=WORKER,
        name=job.key,
        completed="successfully completed.",
        early_success=elastic,
    )


def _nproc_problems(spec: PyTorchJobSpec) -> list[Problem]:
    problems = []
    value = spec.nproc_per_node
    if value is not None and not (value in NPROC_WORDS or _is_count(value)):
        problems.append(Problem("spec.nprocPerNode", "must be auto, cpu, gpu or an integer"))
    if (
        value is not None
        and spec.elastic_policy
        and spec.elastic_policy.n_proc_per_node is not None
    ):
        problems.append(
            Problem(
                "spec.elasticPolicy.nProcPerNode",
                "must not be set together with spec.nprocPerNode (it is deprecated)",
            )
        )
    return problems


def pytorch_validate(job: TrainingJob) -> list[Problem]:
    spec = _spec(job)
    problems = exactly_one(job, FIELD, MASTER, required=False)
    worker = replica_spec(job, WORKER)
    if worker is not None and worker.replicas is not None and worker.replicas < 1:
        problems.append(Problem(spec_path(FIELD, WORKER, "replicas"), "must be at least 1"))
    if spec.elastic_policy is not None and worker is None:
        # Upstream names the missing replica spec, not the policy that needs it.
        message = "is required when spec.elasticPolicy is set"
        problems.append(Problem(spec_path(FIELD, WORKER), message))
    return problems + _nproc_problems(spec) + _elastic_range_problems(spec.elastic_policy)


def _elastic_range_problems(policy: ElasticPolicy | None) -> list[Problem]:
    """torchrun's --nnodes=MIN:MAX needs MIN <= MAX (upstream's webhook does not check)."""
    low = policy.min_replicas if policy is not None else None
    high = policy.max_replicas if policy is not None else None
    if low is None or high is None or low <= high:
        return []
    message = f"is {low}, more than maxReplicas ({high}): no number of workers satisfies both"
    return [Problem("spec.elasticPolicy.minReplicas", message)]


def pytorch_default(job: TrainingJob) -> None:
    spec = _spec(job)
    policy = spec.elastic_policy
    if spec.nproc_per_node is None and (policy is None or policy.n_proc_per_node is None):
        spec.nproc_per_node = "auto"
    if policy is None:
        return
    worker = replica_spec(job, WORKER)
    count = worker.replicas if worker is not None and worker.replicas is not None else 1
    default_elastic_bounds(policy, count)


def _init_container(ctx: ClusterContext) -> dict[str, Any]:
    image = str(ctx.kind_options.get(INIT_IMAGE_OPTION, "alpine:3.10"))
    tries = int(str(ctx.kind_options.get(INIT_TRIES_OPTION, 100)))
    master = shlex.quote(ctx.addressing.host(MASTER, 0))  # a DNS name; quoted all the same
    # Workers must not start torchrun before the master's DNS record exists (Kubernetes only).
    script = (
        f"for attempt in $(seq {tries}); do nslookup {master} && exit 0; "
        "echo waiting for the master; sleep 2; done; exit 1"
    )
    return {
        "name": "init-pytorch",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "resources": {
            "limits": {"cpu": "100m", "memory": "20Mi"},
            "requests": {"cpu": "50m", "memory": "10Mi"},
        },
    }


def pytorch_decorate_pod(ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
    if rtype != WORKER or not ctx.replicas.get(MASTER) or not ctx.addressing.waits_for_dns:
        return
    spec = pod.setdefault("spec", {})
    spec.setdefault("initContainers", []).append(_init_container(ctx))


KIND = Kind(
    kind="PyTorchJob",
    plural="pytorchjobs",
    job_model=PyTorchJob,
    replica_field=FIELD,
    replica_types=(MASTER, WORKER),
    default_container="pytorch",
    port_name="pytorchjob-port",
    default_port=23456,
    default_restart_policy=RestartPolicy.ON_FAILURE,
    framework="pytorch",
    env=pytorch_env,
    is_master_role=pytorch_is_master,
    primary_types=(MASTER, WORKER),  # worker-only (elastic) jobs: worker 0
    deprecated_fields=(("spec.elasticPolicy.nProcPerNode", "spec.nprocPerNode"),),
    status=pytorch_status,
    validate=pytorch_validate,
    default=pytorch_default,
    decorate_pod=pytorch_decorate_pod,
    scale_replica_type=WORKER,
)
