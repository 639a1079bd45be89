"""`@task(task_config=TrainJob(...))`: the function runs on every node of a Kubeflow Trainer v2
TrainJob.

The config holds what a TrainJob's author chooses (the runtime, numNodes, numProcPerNode,
resourcesPerNode, env); the runtime says the rest (the ML policy and its env contract, the pod
template, gang scheduling). The TrainJob is planned with its runtime when the task is defined (the
runtimes trainop finds: $TRAINOP_RUNTIMES, else its defaults) and travels as the planned job, as a
TrainJob command task does. Where the runtime's ML policy starts its processes through a launcher
(torch: `torchrun`, which reads the PET_* variables the policy sets; mpi: the launcher pod's
`mpirun`, the nodes hosting the ranks), the function runs under that launcher, once per process,
and the process of rank 0 is the primary one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flytekit import Resources

from trainop_core.api import trainjob as v2
from trainop_core.api.load import Document
from trainop_core.kinds.mpi import mpi_program
from trainop_core.runtimes.kind import PlannedTrainJob
from trainop_core.runtimes.policies.base import LAUNCHER, NODE
from trainop_core.runtimes.prepare import planned_manifest, prepare_trainjob
from trainop_flyte.spec import Container, resource_requirements

#: ML policy -> (the launcher's argv prefix, the env through which it tells a process its rank).
#: torchrun reads its options from PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
#: PET_MASTER_ADDR and PET_MASTER_PORT, which the torch policy sets on every node.
LAUNCHERS: dict[str, tuple[tuple[str, ...], str]] = {
    "torch": (("torchrun", "--no-python"), "RANK"),
}
MPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")  # what mpirun gives each rank
PLACEHOLDER_NAME = "flyte-task"  # the connector names each attempt's job


@dataclass(frozen=True)
class TrainJob:
    """Run the decorated function on every node of a TrainJob with runtime `runtime`.

    `runtime_kind` is ClusterTrainingRuntime unless set to TrainingRuntime (then found in the
    job's namespace). `num_nodes` and `num_proc_per_node` override the runtime's; `requests` and
    `limits` are each node's resources (`resourcesPerNode`); `env` is added to the node
    container. Unset, the image is the task's own.
    """

    runtime: str = "torch-distributed"
    runtime_kind: str | None = None
    num_nodes: int | None = None
    num_proc_per_node: int | None = None
    requests: Resources | None = None
    limits: Resources | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    namespace: str | None = None
    active_deadline_seconds: int | None = None
    compat: bool = False  # no Flyte-native task type expresses a TrainJob


def trainjob_manifest(
    config: TrainJob, container: Container, *, name: str, namespace: str | None = None
) -> dict[str, Any]:
    """The TrainJob (trainer.kubeflow.org/v1alpha1 wire dict) `config` describes, its trainer
    nodes running `container`."""
    trainer: dict[str, Any] = {"image": config.image or container.image}
    if container.command:
        trainer["command"] = list(container.command)
    if container.args:
        trainer["args"] = list(container.args)
    env = {**dict(container.env), **dict(config.env)}
    if env:
        trainer["env"] = [{"name": key, "value": str(value)} for key, value in env.items()]
    optional = {
        "numNodes": config.num_nodes,
        "numProcPerNode": config.num_proc_per_node,
        "resourcesPerNode": resource_requirements(config.requests, config.limits) or None,
    }
    trainer.update({key: value for key, value in optional.items() if value is not None})
    ref = {"name": config.runtime}
    if config.runtime_kind is not None:
        ref["kind"] = config.runtime_kind
    spec: dict[str, Any] = {"runtimeRef": ref, "trainer": trainer}
    if config.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = config.active_deadline_seconds
    metadata = {"name": name}
    if namespace or config.namespace:
        metadata["namespace"] = namespace or config.namespace or ""
    return {"apiVersion": v2.API_VERSION, "kind": v2.TRAINJOB, "metadata": metadata, "spec": spec}


def plan(
    config: TrainJob,
    container: Container,
    *,
    name: str = PLACEHOLDER_NAME,
    namespace: str | None = None,
) -> PlannedTrainJob:
    """The planned job of the TrainJob, checked with its runtime; InvalidJobError naming the
    TrainJob's fields otherwise."""
    manifest = trainjob_manifest(config, container, name=name, namespace=namespace)
    return prepare_trainjob(Document(manifest, "task_config=TrainJob(...)"))[1]


def planned_job_manifest(
    config: TrainJob, container: Container, *, name: str, namespace: str | None = None
) -> dict[str, Any]:
    """The planned job as the connector receives it (see `planned_manifest`); an empty `name`
    is left for the connector to fill in, as for every function task."""
    manifest = planned_manifest(plan(config, container, name=name or PLACEHOLDER_NAME))
    manifest["metadata"]["name"] = name
    if namespace:
        manifest["metadata"]["namespace"] = namespace
    return manifest


def is_trainjob(manifest: Mapping[str, Any]) -> bool:
    return manifest.get("kind") == v2.TRAINJOB


def trainjob_program(manifest: Mapping[str, Any], rtype: str, argv: list[str]) -> list[str] | None:
    """How replica type `rtype` of a planned TrainJob runs `argv`, as its ML policy starts
    processes: under torchrun on every node (torch); under the launcher's mpirun, the nodes only
    hosting the ranks (mpi: None, they idle, as an MPIJob's workers); else as it is."""
    policy = str((manifest.get("spec") or {}).get("mlPolicy"))
    if policy == "mpi":
        return mpi_program(LAUNCHER if rtype.lower() == LAUNCHER.lower() else NODE, argv)
    launcher = _launcher(manifest.get("kind"), policy)
    return [*launcher[0], *argv] if launcher is not None else list(argv)


def launched_rank(job: Any, environ: Mapping[str, str]) -> int | None:
    """The rank the launcher of a planned TrainJob's policy gave this process, else None."""
    policy = getattr(job.spec, "ml_policy", None)
    if job.kind == v2.TRAINJOB and policy == "mpi":
        names: tuple[str, ...] = MPI_RANK_ENV
    else:
        launcher = _launcher(job.kind, policy)
        names = (launcher[1],) if launcher is not None else ()
    value = next((environ[n] for n in names if n in environ), "")
    return int(value) if value.isdigit() else None


def _launcher(kind: Any, policy: Any) -> tuple[tuple[str, ...], str] | None:
    return LAUNCHERS.get(str(policy)) if kind == v2.TRAINJOB else None
