"""How many replicas one job may have on this operator: `--max-replicas-per-job`.

The operator plans a job replica by replica (a planned pod and Service each, about 7 KiB of
memory per replica, then one API write each), so a job's size must be bounded before it is
planned: `kubectl apply` of one job of 2**31 - 1 replicas, which the API server accepts (the
field is an int32), would otherwise exhaust the operator's memory. The default, 10,000, is far
more than a cluster can run as one job (Kubernetes supports at most 5,000 nodes and 150,000
pods per cluster), keeps one plan under ~100 MiB and ~2 s, and is the Ray backend's bound. The
admission webhook refuses a job above it, and the reconciler fails one that got past no webhook
before planning it. Upstream's v1 operator has no such bound (docs/upstream-differences.md).
"""

from __future__ import annotations

from trainop_core.api.job import TrainingJob
from trainop_core.errors import Problem
from trainop_core.kinds.base import Kind
from trainop_core.replicas import over_replica_limit
from trainop_core.runtimes.origins import Origins

MAX_REPLICAS_PER_JOB = 10_000
FLAG = "--max-replicas-per-job"


def too_many_replicas(job: TrainingJob, kind: Kind, limit: int) -> list[Problem]:
    """A problem when the prepared `job` has more than `limit` replicas, naming the field to
    lower: a v1 job's largest replica count, a TrainJob's own field (`spec.trainer.numNodes`,
    or its runtime's). Pure, O(replica types)."""
    problems = over_replica_limit(job, kind, limit, whose_limit(limit))
    table = getattr(job, "origins", None)
    return [table.problem(p) for p in problems] if isinstance(table, Origins) else problems


def whose_limit(limit: int) -> str:
    return f"this operator runs at most {limit} replicas of one job ({FLAG})"
