"""TrainJob + runtime -> the planned job the core runs (`kind.PlannedTrainJob`). Pure.

Trainer's order: the runtime's trainer step is the base; the TrainJob's `trainer` overrides the
"node" container (image, command, args, env, resources) and the node count; then every runtime
patch, in order, changes what its manager may change; the ML policy gives the env contract.
An mpi runtime has two steps, `launcher` and `node`: the launcher takes the trainer's command
and args, the nodes its resources (they only host ranks: `sleep` unless the runtime says
otherwise), both its image and env.
"""

from __future__ import annotations

from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.trainjob_validation import is_trainer_step
from trainop_core.api.types import (
    MANAGED_BY_OPERATOR,
    CleanPodPolicy,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
    RunPolicy,
    SchedulingPolicy,
)
from trainop_core.kinds import mpi
from trainop_core.planner.pods import copy_template
from trainop_core.runtimes.kind import PORT_NAME, PlannedTrainJob, PlannedTrainJobSpec
from trainop_core.runtimes.policies.base import LAUNCHER, NODE
from trainop_core.runtimes.policies.table import builtin_policies
from trainop_core.runtimes.processes import processes_per_node

_EVERY = ("image", "command", "args", "env", "resources")
_LAUNCHER_FIELDS = ("image", "command", "args", "env")  # a launcher policy's launcher
_HOST_FIELDS = ("image", "env", "resources")  # ... and the nodes hosting its ranks
_IDLE = list(dict(mpi.KIND.idle_commands)[mpi.WORKER])  # what MPIJob's workers run

LIST_PATCHES = ("tolerations", "schedulingGates", "volumes", "imagePullSecrets")
SET_PATCHES = (
    "affinity",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
)


def policy_name(runtime: v2.TrainingRuntime) -> str:
    ml = runtime.spec.ml_policy
    chosen = [
        name for name in ("torch", "xgboost", "jax", "mpi") if ml and getattr(ml, name) is not None
    ]
    return chosen[0] if chosen else "plain"


def translate(job: v2.TrainJob, runtime: v2.TrainingRuntime) -> PlannedTrainJob:
    """The planned job for `job` run with `runtime` (both already validated)."""
    policy = builtin_policies()[policy_name(runtime)]
    trainer = job.spec.trainer or v2.Trainer()
    ml = runtime.spec.ml_policy or v2.MLPolicy()
    nodes = trainer.num_nodes or ml.num_nodes or 1
    launcher_is_node = bool(ml.mpi and ml.mpi.run_launcher_as_node)
    if launcher_is_node:
        nodes = max(nodes - 1, 1)  # Trainer's count: the launcher is one of the nodes
    steps = steps_of(runtime)
    replicas = {
        rtype: _replica(job, step, fields, policy.port, 1 if rtype == LAUNCHER else nodes)
        for rtype, (step, fields) in steps.items()
    }
    trainer_step = next(iter(steps.values()))[0]  # the launcher if there is one, else the nodes
    run_policy = _run_policy(
        job.spec, runtime.spec, _job_spec(trainer_step), nodes + len(steps) - 1
    )
    if policy.launcher is not None:
        # The nodes only host ranks and never end by themselves: once the launcher has, stop
        # them (as JobSet stops the running pods of a JobSet that has finished).
        run_policy.clean_pod_policy = CleanPodPolicy.RUNNING
    return PlannedTrainJob(
        metadata=ObjectMeta.model_validate(job.metadata.model_dump()),
        spec=PlannedTrainJobSpec(
            replica_specs=replicas,
            run_policy=run_policy,
            ml_policy=policy.name,
            num_proc_per_node=processes_per_node(trainer, ml, _resources(replicas[NODE])),
            launcher_is_node=launcher_is_node or None,
        ),
    )


def steps_of(runtime: v2.TrainingRuntime) -> dict[str, tuple[v2.ReplicatedJob, tuple[str, ...]]]:
    """Replica type -> (its replicated job, the trainer fields it takes), in the kind's order."""
    policy = builtin_policies()[policy_name(runtime)]
    jobs = runtime.spec.template.spec.replicated_jobs
    if policy.launcher is None:
        return {NODE: (next(j for j in jobs if is_trainer_step(j)), _EVERY)}
    named = {j.name: j for j in jobs}
    return {
        LAUNCHER: (named[v2.LAUNCHER], _LAUNCHER_FIELDS),
        NODE: (named[v2.NODE], _HOST_FIELDS),
    }


def _job_spec(step: v2.ReplicatedJob) -> dict[str, Any]:
    spec: dict[str, Any] = step.template.get("spec") or {}
    return spec


def _replica(
    job: v2.TrainJob, step: v2.ReplicatedJob, fields: tuple[str, ...], port: int, count: int
) -> ReplicaSpec:
    pod = copy_template(_job_spec(step).get("template") or {})
    _override_node(pod, job.spec.trainer or v2.Trainer(), port, fields)
    for patch in job.spec.runtime_patches or []:
        _apply_patch(pod, patch, step.name)
    restart = (pod.get("spec") or {}).pop("restartPolicy", None)
    return ReplicaSpec(
        replicas=count,
        restart_policy=RestartPolicy(restart) if restart == "OnFailure" else RestartPolicy.NEVER,
        template=pod,
    )


def _resources(nodes: ReplicaSpec) -> dict[str, Any] | None:
    """The resources of the nodes' `node` container (the TrainJob's, else the runtime's)."""
    node = _container(nodes.template, "containers", v2.NODE)
    return node.get("resources") if node is not None else None


def _override_node(
    pod: dict[str, Any], trainer: v2.Trainer, port: int, fields: tuple[str, ...]
) -> None:
    node = _container(pod, "containers", v2.NODE)
    if node is None:
        return
    for field, value in (("image", trainer.image), ("command", trainer.command)):
        if value is not None and field in fields:
            node[field] = value
    if trainer.args is not None and "args" in fields:
        node["args"] = list(trainer.args)
    if trainer.resources_per_node is not None and "resources" in fields:
        node["resources"] = dict(trainer.resources_per_node)
    if "command" not in fields and not node.get("command"):
        node["command"], node["args"] = _IDLE[:1], _IDLE[1:]  # hosts ranks only
    node["env"] = merge_env(node.get("env") or [], trainer.env or [])
    ports = node.setdefault("ports", [])
    if not any(p.get("name") == PORT_NAME for p in ports if isinstance(p, dict)):
        ports.append({"name": PORT_NAME, "containerPort": port})


def _container(pod: dict[str, Any], field: str, name: str) -> dict[str, Any] | None:
    containers = pod.setdefault("spec", {}).get(field) or []
    return next((c for c in containers if c.get("name") == name), None)


def merge_env(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """EnvVars of `base` with those of `extra` replacing the same names (extra's last)."""
    names = {e.get("name") for e in extra}
    return [e for e in base if e.get("name") not in names] + [dict(e) for e in extra]


def _apply_patch(pod: dict[str, Any], patch: v2.RuntimePatch, step: str) -> None:
    template = (patch.training_runtime_spec or {}).get("template") or {}
    for job_patch in (template.get("spec") or {}).get("replicatedJobs") or []:
        if job_patch.get("name") != step:
            continue
        job_template = job_patch.get("template") or {}
        pod_patch = (job_template.get("spec") or {}).get("template") or {}
        _patch_metadata(pod, job_template.get("metadata"))
        _patch_metadata(pod, pod_patch.get("metadata"))
        _patch_pod_spec(pod.setdefault("spec", {}), pod_patch.get("spec") or {})


def _patch_metadata(pod: dict[str, Any], meta: dict[str, Any] | None) -> None:
    for field in ("labels", "annotations"):
        if meta and meta.get(field):
            pod.setdefault("metadata", {}).setdefault(field, {}).update(meta[field])


def _patch_pod_spec(spec: dict[str, Any], patch: dict[str, Any]) -> None:
    if patch.get("nodeSelector"):
        spec.setdefault("nodeSelector", {}).update(patch["nodeSelector"])
    for field in LIST_PATCHES:
        spec[field] = (spec.get(field) or []) + list(patch.get(field) or [])
        if not spec[field]:
            del spec[field]
    for field in SET_PATCHES:
        if field in patch:
            spec[field] = patch[field]
    for field in ("containers", "initContainers"):
        for change in patch.get(field) or []:
            target = next((c for c in spec.get(field) or [] if c["name"] == change["name"]), None)
            if target is not None:
                _patch_container(target, change)


def _patch_container(container: dict[str, Any], change: dict[str, Any]) -> None:
    container["env"] = merge_env(container.get("env") or [], change.get("env") or [])
    mounts = (container.get("volumeMounts") or []) + list(change.get("volumeMounts") or [])
    if mounts:
        container["volumeMounts"] = mounts
    if "securityContext" in change:
        container["securityContext"] = change["securityContext"]


def _run_policy(
    spec: v2.TrainJobSpec, runtime: v2.TrainingRuntimeSpec, job_spec: dict[str, Any], pods: int
) -> RunPolicy:
    managed = spec.managed_by
    return RunPolicy(
        suspend=spec.suspend,
        active_deadline_seconds=spec.active_deadline_seconds,
        backoff_limit=job_spec.get("backoffLimit"),
        managed_by=MANAGED_BY_OPERATOR if managed in (None, v2.MANAGED_BY_TRAINER) else managed,
        scheduling_policy=_gang(runtime.pod_group_policy, pods),
    )


def _gang(policy: v2.PodGroupPolicy | None, pods: int) -> SchedulingPolicy | None:
    if policy is None or (policy.coscheduling is None and policy.volcano is None):
        return None
    timeout = policy.coscheduling.schedule_timeout_seconds if policy.coscheduling else None
    return SchedulingPolicy(min_available=pods, schedule_timeout_seconds=timeout or None)
