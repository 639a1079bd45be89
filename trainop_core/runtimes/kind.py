"""The one internal kind every TrainJob is planned as: the trainer nodes, and a launcher where
the ML policy has one (mpi).

A TrainJob and its runtime become a `PlannedTrainJob` (`translate.py`); the planner then runs it
as any v1 job. The ML policy named in the planned spec supplies the env contract, and for a
launcher policy the launcher pattern's hooks (`kinds.mpi`); the pods get the JobSet labels the
Kubeflow SDK selects and reads them by (see `sdk_labels`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, PrivateAttr

from trainop_core.api import trainjob as v2
from trainop_core.api.job import JobSpec, TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.common import worker_style_status
from trainop_core.kinds.mpi import (
    decorate_launcher_pod,
    launcher_objects,
    launcher_start_after,
    launcher_status,
)
from trainop_core.runtimes.policies.base import LAUNCHER, NODE, MLPolicy
from trainop_core.runtimes.policies.table import builtin_policies
from trainop_core.runtimes.status import trainjob_status

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
PORT_NAME = "node-port"


class PlannedTrainJobSpec(JobSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="replicaSpecs")
    ml_policy: str = "plain"
    num_proc_per_node: int = 1  # runtimes.processes: Trainer's count, "auto" resolved
    launcher_is_node: bool | None = None  # mpi's runLauncherAsNode: the launcher hosts ranks too


class PlannedTrainJob(TrainingJob):
    kind: str = v2.TRAINJOB
    spec: PlannedTrainJobSpec
    # The TrainJob it was planned from, as written with the CRDs' defaults (`prepare.as_written`),
    # or, read from a cluster, as stored there (its metadata has a uid). What `trainop get -o
    # yaml` prints; None for a job made from a planned manifest (Flyte, KFP).
    trainjob: dict[str, Any] | None = None
    # Where each of its parts came from (`runtimes.origins`), set where it was planned from a
    # TrainJob and a runtime: what names a problem found in it by the TrainJob's own fields.
    _origins: Any = PrivateAttr(None)

    @property
    def origins(self) -> Any:
        """The `runtimes.origins.Origins` it was planned with; None if not planned here."""
        return self._origins

    @origins.setter
    def origins(self, table: Any) -> None:
        self._origins = table

    def as_stored(self) -> dict[str, Any] | None:
        """The TrainJob as stored: the cluster's object where one was read, else as written
        with the identity this job's store gave it, its `spec.suspend` now and Trainer's
        status for the job's."""
        if self.trainjob is None:
            return None
        written = self.trainjob.get("metadata") or {}
        if "uid" in written:  # read from a cluster
            return {key: self.trainjob[key] for key in _TOP if key in self.trainjob}
        given = self.metadata.model_dump(by_alias=True, exclude_none=True, mode="json")
        identity = {
            k: given[k] for k in ("name", "namespace", "uid", "creationTimestamp") if k in given
        }
        spec = dict(self.trainjob.get("spec") or {})
        spec["suspend"] = bool(self.spec.run_policy.suspend)
        stored = {
            "apiVersion": v2.API_VERSION,
            "kind": v2.TRAINJOB,
            "metadata": written | identity,
            "spec": spec,
        }
        if self.status is not None:
            stored["status"] = trainjob_status(self).to_dict()
        return stored


_TOP = ("apiVersion", "kind", "metadata", "spec", "status")


def _spec(job: TrainingJob) -> PlannedTrainJobSpec:
    assert isinstance(job.spec, PlannedTrainJobSpec)  # reason: this kind's job model guarantees it
    return job.spec


def _policy(job: TrainingJob) -> MLPolicy:
    return builtin_policies()[_spec(job).ml_policy]


def _policy_env(ctx: ClusterContext, rtype: str, index: int) -> list[dict[str, Any]]:
    if rtype != NODE:
        return []  # a launcher's env is the launcher pattern's (see _decorate)
    spec = _spec(ctx.job)
    return _policy(ctx.job).env(ctx, index, spec.num_proc_per_node)


def _is_master(replicas: Mapping[str, int], rtype: str, index: int) -> bool:
    return rtype == LAUNCHER if LAUNCHER in replicas else index == 0


def _status(
    job: TrainingJob, counts: Mapping[str, ReplicaCounts], worker0_succeeded: bool
) -> Verdict | Sequence[Verdict]:
    layout = _policy(job).launcher
    if layout is not None:
        return launcher_status(layout, job, counts)  # the launcher's success is the job's
    # A JobSet's default success policy: every node has succeeded.
    return worker_style_status(job, counts, leader=NODE, name=job.key)


def _validate(job: TrainingJob) -> list[Problem]:
    policy = getattr(job.spec, "ml_policy", "")
    known = builtin_policies()
    if policy in known:
        return []
    return [Problem("spec.mlPolicy", f"expected one of {', '.join(known)}, got {policy!r}")]


def _decorate(ctx: ClusterContext, rtype: str, index: int, pod: dict[str, Any]) -> None:
    """The SDK's labels; for a launcher policy, the launcher pattern's pod changes."""
    launcher = LAUNCHER in ctx.replicas
    labels = pod["metadata"].setdefault("labels", {})
    labels.update(sdk_labels(ctx.job.name, index, rtype, trainer=rtype == LAUNCHER or not launcher))
    layout = _policy(ctx.job).launcher
    if layout is not None:
        decorate_launcher_pod(layout, ctx, rtype, index, pod)


def sdk_labels(
    job_name: str, index: int, rtype: str = NODE, *, trainer: bool = True
) -> dict[str, str]:
    """The labels a JobSet's pod carries that the Kubeflow SDK lists and reads pods by; the
    trainer step (the nodes, or the launcher where there is one) also carries the ancestor's."""
    labels = {
        JOBSET_NAME_LABEL: job_name,
        REPLICATED_JOB_LABEL: v2.LAUNCHER if rtype == LAUNCHER else v2.NODE,
        JOB_INDEX_LABEL: "0",
        COMPLETION_INDEX_LABEL: str(index),
    }
    return labels | ({v2.ANCESTOR_LABEL: v2.TRAINER_STEP} if trainer else {})


def _objects(ctx: ClusterContext, running: Mapping[str, Sequence[int]]) -> list[dict[str, Any]]:
    layout = _policy(ctx.job).launcher
    return [] if layout is None else launcher_objects(layout, ctx, running)


def _start_after(ctx: ClusterContext) -> Mapping[str, str]:
    layout = _policy(ctx.job).launcher
    return {} if layout is None else launcher_start_after(layout, ctx)


KIND = Kind(
    kind=v2.TRAINJOB,
    plural="trainjobs",
    job_model=PlannedTrainJob,
    replica_field="replicaSpecs",
    replica_types=(LAUNCHER, NODE),  # a launcher only where the ML policy has one (mpi)
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
    decorate_pod=_decorate,
    objects=_objects,
    start_after=_start_after,
    primary_types=(LAUNCHER, NODE),  # mpirun forwards every rank's output to the launcher
)


SCHEME = KIND.kind  # --enable-scheme TrainJob


def split_schemes(names: Sequence[str]) -> tuple[list[str], bool]:
    """(--enable-scheme names of v1 kinds, whether TrainJob is enabled). TrainJob is opt-in:
    without it no trainer.kubeflow.org resource is watched (its CRDs need not exist). Here, not
    in runtimes.operator, so the operator's command line can read it without importing the
    controller (runtimes.operator imports trainop_core.operator: a cycle)."""
    v1 = [n for n in names if n.lower() != SCHEME.lower()]
    return v1, len(v1) != len(names)
