"""Small helpers the kind modules share: env entries, replica lookups, the worker-style status rule.

Nothing here knows about one particular kind; each kind module stays a description plus hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import ReplicaSpec, RestartPolicy
from trainop_core.errors import Problem
from trainop_core.kinds.base import ReplicaCounts, Verdict

RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
RESTARTING = "Restarting"
NOTHING = Verdict("")


def env_var(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def total_replicas(replicas: Mapping[str, int]) -> int:
    return sum(replicas.values())


def replica_spec(job: TrainingJob, rtype: str) -> ReplicaSpec | None:
    """The spec of `rtype`, keys matched case-insensitively (as before defaulting)."""
    for key, spec in job.spec.replica_specs.items():
        if key.lower() == rtype.lower():
            return spec
    return None


def spec_path(job_field: str, rtype: str, leaf: str = "") -> str:
    path = f"spec.{job_field}.{rtype}"
    return f"{path}.{leaf}" if leaf else path


def exactly_one(job: TrainingJob, job_field: str, rtype: str, *, required: bool) -> list[Problem]:
    """Problems unless replica type `rtype` has exactly one replica (or is absent and optional)."""
    spec = replica_spec(job, rtype)
    if spec is None:
        return [Problem(spec_path(job_field, rtype), "is required")] if required else []
    if spec.replicas != 1:
        return [Problem(spec_path(job_field, rtype, "replicas"), "must be 1")]
    return []


def failure_verdict(
    kind: str, name: str, rtype: str, counts: ReplicaCounts, *, restart: bool
) -> Verdict:
    """Upstream's '<n> replica(s) failed': Restarting if the policy restarts, else Failed."""
    if restart:
        msg = f"{kind} {name} is restarting because {counts.failed} {rtype} replica(s) failed."
        return Verdict(RESTARTING, msg, rtype)
    msg = f"{kind} {name} is failed because {counts.failed} {rtype} replica(s) failed."
    return Verdict(FAILED, msg, rtype)


def strongest(verdicts: list[Verdict]) -> Verdict:
    """Several replica types may speak in one round; a failure outranks success outranks running.

    Upstream sets the conditions one after another and the sticky Failed wins; picking the
    strongest verdict gives the same final state.
    """
    order = {FAILED: 4, SUCCEEDED: 3, RESTARTING: 2, RUNNING: 1, "": 0}
    return max(verdicts, key=lambda v: order[v.state], default=NOTHING)


def worker_style_status(
    job: TrainingJob,
    counts: Mapping[str, ReplicaCounts],
    *,
    leader: str,
    name: str,
    completed: str = "is successfully completed.",
    early_success: bool = False,
) -> Verdict:
    """PyTorch's rule: `leader` decides success and running; any type's failures restart or fail.

    `name` is how the success and running messages name the job (upstream: `ns/name` in
    worker-only jobs); failure messages always say the bare name, as upstream's do.
    `early_success` is PyTorch's elastic rule: one succeeded worker is enough.
    """
    verdicts: list[Verdict] = []
    lead = counts.get(leader)
    if lead is not None:
        if lead.replicas - lead.succeeded == 0 or (early_success and lead.succeeded > 0):
            return Verdict(SUCCEEDED, f"{job.kind} {name} {completed}", leader)
        if lead.active > 0:
            verdicts.append(Verdict(RUNNING, f"{job.kind} {name} is running.", leader))
    for rtype, c in counts.items():
        if c.failed > 0 and c.replicas > c.succeeded + c.active:
            restart = c.restart_policy != RestartPolicy.NEVER
            verdicts.append(failure_verdict(job.kind, job.name, rtype, c, restart=restart))
    return strongest(verdicts)


class ElasticBounds(Protocol):
    min_replicas: int | None
    max_replicas: int | None


def default_elastic_bounds(policy: ElasticBounds, workers: int | None) -> None:
    """Upstream's elasticPolicy defaulting, the same for every kind with min/max bounds: a
    missing bound copies the other; with neither, both become the Worker count."""
    if policy.min_replicas is None and policy.max_replicas is None:
        policy.min_replicas = policy.max_replicas = workers
    elif policy.min_replicas is None:
        policy.min_replicas = policy.max_replicas
    elif policy.max_replicas is None:
        policy.max_replicas = policy.min_replicas
