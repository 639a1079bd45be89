"""Which replicas a job asks for, and their short names (`master-0`), for every layer.

The planner, both backends and the client need the same list: replica types in the kind's order
(unknown types, which TF allows, last), an unset count meaning upstream's default of 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainop_core.api.job import TrainingJob
from trainop_core.api.podtemplate import join
from trainop_core.errors import Problem
from trainop_core.kinds.base import Kind


def replica_counts(job: TrainingJob, kind: Kind) -> dict[str, int]:
    """Desired replicas per canonical replica type, in the kind's order. Pure."""
    counts: dict[str, int] = {}
    for rtype, spec in job.spec.replica_specs.items():
        counts[kind.canonical_replica_type(rtype)] = 1 if spec.replicas is None else spec.replicas
    ordered = [t for t in kind.replica_types if t in counts]
    ordered += [t for t in counts if t not in kind.replica_types]
    return {t: counts[t] for t in ordered}


def over_replica_limit(job: TrainingJob, kind: Kind, limit: int, whose: str) -> list[Problem]:
    """A problem when the job has more than `limit` replicas in all, named at the `replicas` of
    its largest replica type (the count to lower; the kind's first of equals); `whose` says
    whose limit it is. Reads only the counts (O(replica types)): safe before anything is
    planned for a job of 2**31 - 1 replicas. Pure."""
    counts = replica_counts(job, kind)
    total = sum(counts.values())
    if total <= limit:
        return []
    largest = max(counts, key=counts.__getitem__)  # the first of equals: the kind's order
    path = join(f"spec.{kind.replica_field}", largest) + ".replicas"
    return [Problem(path, f"the job has {total} replicas in all; {whose}")]


def replica_id(rtype: str, index: int) -> str:
    """`master-0`: a replica's short name (log tags, local ports, CLI); the pod name minus the
    job's."""
    return f"{rtype.lower()}-{index}"


def primary_replica(job: TrainingJob, kind: Kind) -> tuple[str, int]:
    """(replica type, index) of the replica whose output is the job's result, as the kind
    defines it (`Kind.primary_types`): TF chief, else master, else worker 0; PyTorch and XGBoost
    master 0; MXNet worker 0 (each kind module says). Pure."""
    return kind.primary_replica(replica_counts(job, kind))


def replica_ids(job: TrainingJob, kind: Kind) -> list[str]:
    """Every replica's short name, in `replica_counts` order. Pure."""
    return [
        replica_id(rtype, index)
        for rtype, count in replica_counts(job, kind).items()
        for index in range(count)
    ]


def launched_rank(kind: Kind, environ: Mapping[str, str]) -> int | None:
    """The rank the kind's launcher gave this process (`Kind.rank_env`), None where it started
    none (or the kind has no launcher). Pure."""
    for name in kind.rank_env:
        value = environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None
