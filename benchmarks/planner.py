"""How long the pure planner takes, and how much memory it needs, as jobs grow.

    PYTHONPATH=. python benchmarks/planner.py [--runs 5]

For each size: a first reconcile (every pod and service planned) and a steady-state round (all
pods observed Running: nothing to create, status unchanged). Time is the median CPU time of
`--runs` runs; peak memory is measured in a separate run under tracemalloc.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timezone

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
    plan,
)

SIZES = (10, 100, 1_000, 5_000)
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def pytorch_job(replicas: int) -> TrainingJob:
    container = {"name": "pytorch", "image": "python:3.11", "command": ["python", "train.py"]}
    template = {"spec": {"containers": [container]}}
    data = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bench", "namespace": "default", "uid": "u-1"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": replicas - 1, "template": template},
            }
        },
    }
    return load_job(data)


def all_running(first: Plan, kind: Kind) -> Observed:
    pods, services = [], []
    for manifest in first.create_pods:
        labels = manifest["metadata"]["labels"]
        rtype = kind.canonical_replica_type(labels["training.kubeflow.org/replica-type"])
        index = int(labels["training.kubeflow.org/replica-index"])
        name = manifest["metadata"]["name"]
        pods.append(ObservedPod(name, rtype, index, "Running"))
        services.append(ObservedService(name, rtype, index))
    return Observed(tuple(pods), tuple(services))


def timed(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        # CPU time, not wall time: the benchmark machine is shared, and waiting for a core is
        # not the planner's cost.
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def peak_mib(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def measure(replicas: int, runs: int) -> list[str]:
    kind = build_registry(entry_points=False).get("PyTorchJob")
    job = pytorch_job(replicas)
    addressing = KubernetesAddressing(job, kind)
    first = plan(job, kind, Observed(), NOW, addressing)
    assert len(first.create_pods) == replicas  # the benchmark plans what it claims to
    assert first.status is not None
    steady_job = job.model_copy(update={"status": first.status})
    steady_seen = all_running(first, kind)
    warm = plan(steady_job, kind, steady_seen, NOW, addressing)
    steady_job = steady_job.model_copy(update={"status": warm.status or first.status})

    def create() -> Plan:
        return plan(job, kind, Observed(), NOW, addressing)

    def steady() -> Plan:
        return plan(steady_job, kind, steady_seen, NOW, addressing)

    assert not steady().create_pods
    rows = []
    for label, fn in (("first reconcile", create), ("steady state", steady)):
        seconds = timed(fn, runs)
        rows.append(
            f"{replicas:>8,} {label:<16} {seconds * 1000:>10.1f} "
            f"{seconds / replicas * 1e6:>12.1f} {peak_mib(fn):>12.1f}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per size")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), help="replica counts")
    args = parser.parse_args()
    print(f"{'replicas':>8} {'round':<16} {'cpu ms':>10} {'us/replica':>12} {'peak MiB':>12}")
    for size in args.sizes:
        for row in measure(size, args.runs):
            print(row, flush=True)


if __name__ == "__main__":
    main()
