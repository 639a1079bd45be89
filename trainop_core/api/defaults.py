"""Upstream's defaulting, applied to a copy: `apply_defaults` returns a new job.

Upstream has no mutating webhook; its reconciler defaults a private copy on every pass. trainop's
operator also serves a defaulting webhook (`operator.webhook.review.mutate`) that stores these
values with the job; every other path (the controller, the CLI, the client) defaults a copy, so a
job stored without the webhook runs the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from trainop_core.api.job import TrainingJob
from trainop_core.api.podtemplate import default_container
from trainop_core.api.types import CleanPodPolicy, ReplicaSpec

if TYPE_CHECKING:
    from trainop_core.kinds.base import Kind

JobT = TypeVar("JobT", bound=TrainingJob)


def apply_defaults(job: JobT, kind: Kind) -> JobT:
    """A defaulted deep copy of `job`. Idempotent: defaulting a defaulted job changes nothing."""
    defaulted = job.model_copy(deep=True)
    defaulted.spec.replica_specs = normalise_replica_types(defaulted.spec.replica_specs, kind)
    counts = dict(kind.default_replicas)
    for rtype, spec in defaulted.spec.replica_specs.items():
        _default_replica(spec, kind, counts.get(rtype, 1))
    kind.default(defaulted)
    # After the kind's own defaults: MPIJob fills it from its legacy spec.cleanPodPolicy first.
    if defaulted.spec.run_policy.clean_pod_policy is None:
        defaulted.spec.run_policy.clean_pod_policy = CleanPodPolicy.NONE
    return defaulted


def normalise_replica_types(specs: dict[str, ReplicaSpec], kind: Kind) -> dict[str, ReplicaSpec]:
    """Keys spelled the kind's way (worker -> Worker), order kept.

    A key whose canonical spelling is already taken (both `worker` and `Worker`) is left as written
    so validation can report the duplicate instead of one silently replacing the other.
    """
    canonical = [kind.canonical_replica_type(name) for name in specs]
    result: dict[str, ReplicaSpec] = {}
    for (name, spec), wanted in zip(specs.items(), canonical, strict=True):
        clash = canonical.count(wanted) > 1
        result[name if clash else wanted] = spec
    return result


def _default_replica(spec: ReplicaSpec, kind: Kind, replicas: int) -> None:
    if spec.replicas is None:
        spec.replicas = replicas
    if spec.restart_policy is None:
        spec.restart_policy = kind.default_restart_policy
    if kind.adds_default_port:
        _default_port(spec, kind)


def _default_port(spec: ReplicaSpec, kind: Kind) -> None:
    # Peers find the training process through this named port, so upstream always exposes it.
    container = default_container(spec.template, kind.default_container)
    if container is None:
        return
    ports = container.get("ports")
    if not isinstance(ports, list):
        ports = container["ports"] = []
    if not any(isinstance(p, dict) and p.get("name") == kind.port_name for p in ports):
        ports.append({"name": kind.port_name, "containerPort": kind.default_port})
