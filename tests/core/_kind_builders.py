"""Jobs of every kind, and a tiny in-memory 'cluster' that applies plans, for the planner tests.

`Sim` keeps pods/services as the planner would observe them and applies each Plan the way a
backend does (deletions, creations as Pending pods, annotation patch, status write). Tests then
move pods through phases with `Sim.set` and plan again: plan-in/plan-out, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from tests.builders import JobBuilder, make_job
from trainop_core.api.defaults import apply_defaults
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import load_job
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import build_registry
from trainop_core.planner import (
    KubernetesAddressing,
    Observed,
    ObservedPod,
    ObservedService,
    Plan,
    PlanOptions,
    plan,
)
from trainop_core.planner.pods import REPLICA_INDEX, REPLICA_TYPE

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
ALL_KINDS = ("TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "JAXJob", "PaddleJob")
# MPIJob's launcher pattern (no Services, a launcher that waits) has tests of its own.
REGISTRY = build_registry(entry_points=False)


def kind_of(name: str) -> Kind:
    return REGISTRY.get(name)


def builder(kind: str, name: str = "demo") -> JobBuilder:
    """A typical topology per kind: the replicas each kind's success rule reads are present."""
    if kind == "JAXJob":
        return make_job(kind, name, replica_field="jaxReplicaSpecs", container="jax").workers(2)
    b = make_job(kind, name)
    if kind == "TFJob":
        return b.workers(2)
    if kind == "MXJob":
        return b.scheduler().servers(1).workers(2)
    return b.master().workers(2)  # PyTorchJob, XGBoostJob, PaddleJob


def job(kind: str, name: str = "demo", **run_policy: Any) -> TrainingJob:
    b = builder(kind, name)
    if run_policy:
        b.run_policy(**run_policy)
    return load_job(b.build(), registry=REGISTRY)


def with_restart_policy(job: TrainingJob, policy: str) -> TrainingJob:
    data = job.to_dict()
    for spec in data["spec"][kind_of(job.kind).replica_field].values():
        spec["restartPolicy"] = policy
    return load_job(data, registry=REGISTRY)


# Pods whose success ends the job under each kind's own rule (reference §2).
LEADERS = {
    "TFJob": [("Worker", 0)],  # default success policy: worker 0 is the chief
    "PyTorchJob": [("Master", 0)],
    "MXJob": [("Scheduler", 0)],
    "XGBoostJob": [("Master", 0)],
    "JAXJob": [("Worker", 0), ("Worker", 1)],  # every worker
    "PaddleJob": [("Master", 0)],
}
# A worker pod that is never a leader for the kind (for failure tests).
FOLLOWER = {
    "TFJob": ("Worker", 1),
    "PyTorchJob": ("Worker", 1),
    "MXJob": ("Worker", 1),
    "XGBoostJob": ("Worker", 1),
    "JAXJob": ("Worker", 1),
    "PaddleJob": ("Worker", 1),
}


def observed_pod(manifest: dict[str, Any], kind: Kind, phase: str = "Pending") -> ObservedPod:
    labels = manifest["metadata"]["labels"]
    return ObservedPod(
        name=manifest["metadata"]["name"],
        replica_type=kind.canonical_replica_type(labels[REPLICA_TYPE]),
        index=int(labels[REPLICA_INDEX]),
        phase=phase,
    )


@dataclass
class Sim:
    """A job plus what exists for it; `step` plans and applies like a backend would."""

    job: TrainingJob
    now: datetime = T0
    options: PlanOptions = field(default_factory=PlanOptions)
    pods: dict[str, ObservedPod] = field(default_factory=dict)
    services: dict[str, ObservedService] = field(default_factory=dict)
    pod_group_phase: str | None = None
    last: Plan = field(default_factory=Plan)

    @property
    def kind(self) -> Kind:
        return kind_of(self.job.kind)

    def observed(self) -> Observed:
        return Observed(
            tuple(self.pods.values()), tuple(self.services.values()), self.pod_group_phase
        )

    def plan(self) -> Plan:
        addressing = KubernetesAddressing(self.job, self.kind)
        return plan(self.job, self.kind, self.observed(), self.now, addressing, self.options)

    def step(self, seconds: float = 0) -> Plan:
        self.now += timedelta(seconds=seconds)
        self.last = self.plan()
        self.apply(self.last)
        return self.last

    def apply(self, p: Plan) -> None:
        for name in p.delete_pods:
            self.pods.pop(name, None)
        for name in p.delete_services:
            self.services.pop(name, None)
        for manifest in p.create_pods:
            pod = observed_pod(manifest, self.kind)
            self.pods[pod.name] = pod
        for manifest in p.create_services:
            pod = observed_pod(manifest, self.kind)
            self.services[pod.name] = ObservedService(pod.name, pod.replica_type, pod.index)
        updates: dict[str, Any] = {}
        if p.job_annotations:
            meta = self.job.metadata.model_copy()
            meta.annotations = {**(meta.annotations or {}), **p.job_annotations}
            updates["metadata"] = meta
        if p.status is not None:
            updates["status"] = p.status
        if updates:
            self.job = self.job.model_copy(update=updates)

    def set(self, rtype: str, index: int, phase: str, **changes: Any) -> None:
        name = f"{self.job.name}-{rtype.lower()}-{index}"
        self.pods[name] = replace(self.pods[name], phase=phase, **changes)

    def set_all(self, phase: str) -> None:
        for name, pod in self.pods.items():
            self.pods[name] = replace(pod, phase=phase)

    def change(self, **run_policy: Any) -> None:
        """Edit the stored job's runPolicy (as `kubectl edit` would)."""
        policy = self.job.spec.run_policy.model_copy(update=run_policy)
        spec = self.job.spec.model_copy(update={"run_policy": policy})
        self.job = self.job.model_copy(update={"spec": spec})

    def conditions(self) -> dict[str, str]:
        status = self.job.status
        return {c.type.value: c.status.value for c in status.conditions} if status else {}

    def last_condition(self) -> str:
        assert self.job.status is not None
        return self.job.status.conditions[-1].type.value


def defaulted(job: TrainingJob) -> TrainingJob:
    return apply_defaults(job, kind_of(job.kind))
