"""Does the operator's memory grow with finished, deleted jobs? tracemalloc inside the operator.

    PYTHONPATH=. python benchmarks/operator_memory.py                     # 5 batches of 100 jobs
    PYTHONPATH=. python benchmarks/operator_memory.py --batches 4 --jobs 200 --json out.json

A fresh control plane with kube-controller-manager (its garbage collector removes a deleted
job's pods and Services), the kubelet stand-in (every pod runs `--run-seconds`) and trainop's
operator under benchmarks/traced_operator.py (tracemalloc on; raised client limits). Each batch
creates `--jobs` jobs (PyTorchJob, TFJob, XGBoostJob taking turns, `--replicas` pods each), waits
until all Succeeded, deletes them, waits until none of their pods and Services is left and the
operator's work queue is empty, then reads the operator's RSS and takes a tracemalloc snapshot.
Prints, per batch, RSS and traced memory; then what grew from the first batch's snapshot to the
last's, by line: memory that grows with every deleted job shows up there with a count near a
multiple of the jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import harness
import operator_vs_upstream as ovu

from trainop_core.crds import all_crds
from trainop_core.kinds.table import build_registry
from trainop_core.testing.controlplane import ControlPlane

KINDS = ("PyTorchJob", "TFJob", "XGBoostJob")
Obj = dict[str, Any]


def start_operator(cp: ControlPlane, workdir: Path) -> harness.Process:
    namespace, name = ovu.TRAINOP_SA
    kubeconfig = cp.kubeconfig_for(ovu._token(cp, namespace, name), workdir / "operator.kc")
    os.environ["TRACE_DIR"] = str(workdir)
    launcher = (str(Path(__file__).with_name("traced_operator.py")),)
    qps, burst = ovu.LIMITS["raised"]
    process = harness.start_trainop(
        "trainop", kubeconfig, KINDS, qps, burst, workdir, launcher=launcher
    )
    harness.wait_ready(process)
    return process


def batch(cp: ControlPlane, workload: harness.Workload, n: int, args: argparse.Namespace) -> None:
    """Create the batch's jobs, wait for them, delete them, wait until their children are gone."""
    jobs = workload.jobs(f"b{n}", args.jobs)
    names = {m["metadata"]["name"] for _, m in jobs}
    watch = harness.JobWatch(cp.rest, workload).start()
    try:
        harness.Submitter(cp.rest, workload, jobs, args.rate).start().join()
        if not watch.wait(names, args.timeout):
            raise SystemExit(f"batch {n}: not all jobs finished")
    finally:
        watch.stop()
    for kind, manifest in jobs:
        path = f"{harness.GROUP_PATH}/namespaces/{harness.NAMESPACE}/{workload.plural(kind)}"
        cp.rest.delete(f"{path}/{manifest['metadata']['name']}", propagationPolicy="Background")
    deadline = time.monotonic() + args.timeout
    for plural in ("pods", "services"):
        while cp.rest.get(f"/api/v1/namespaces/{harness.NAMESPACE}/{plural}").get("items"):
            if time.monotonic() > deadline:
                raise SystemExit(f"batch {n}: {plural} left after the jobs were deleted")
            time.sleep(1.0)


def settle(process: harness.Process, timeout: float = 60.0) -> None:
    """Until the operator's work queue is empty (the deletions' last reconciles done)."""
    deadline = time.monotonic() + timeout
    while (process.queue_depth() or 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2.0)  # the informers' last delete events


def snapshot(process: harness.Process, workdir: Path, n: int) -> Obj:
    os.kill(process.pid, signal.SIGUSR1)
    done = workdir / f"snapshot-{n}.done"
    deadline = time.monotonic() + 120
    while not done.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the operator wrote no snapshot")
        time.sleep(0.2)
    traced = json.loads(done.read_text())
    rss = harness.memory_kb(process.pid)
    return {"batch": n, "rss_mib": rss["now"] / 1024, "traced_mib": traced["current"] / 2**20}


def growth(workdir: Path, first: int, last: int, top: int) -> list[Obj]:
    """What grew between two snapshots, by line of the allocation's innermost frame."""
    before = tracemalloc.Snapshot.load(str(workdir / f"snapshot-{first}.pickle"))
    after = tracemalloc.Snapshot.load(str(workdir / f"snapshot-{last}.pickle"))
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    return [
        {"where": str(d.traceback[0]), "kib": d.size_diff / 1024, "count": d.count_diff}
        for d in diff[:top]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="batches, a snapshot after each")
    parser.add_argument("--jobs", type=int, default=100, help="jobs per batch")
    parser.add_argument("--replicas", type=int, default=2, help="pods per job")
    parser.add_argument("--rate", type=float, default=10.0, help="jobs created a second")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="each pod's run (1 s)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a batch may take")
    parser.add_argument("--top", type=int, default=15, help="lines of growth to print")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--workdir", type=Path, help="logs, snapshots (default: a temp dir)")
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw_argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="operator-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    registry = build_registry(entry_points=False)
    workload = harness.Workload(registry, KINDS, args.replicas)
    crds = all_crds([registry.get(k) for k in KINDS])
    samples = []
    with ControlPlane(crds=crds) as cp:
        cp.ensure_namespace(harness.NAMESPACE)
        kubelet = harness.start_kubelet(cp, args.run_seconds, 4, workdir)
        operator = start_operator(cp, workdir)
        try:
            for n in range(args.batches):
                batch(cp, workload, n, args)
                settle(operator)
                samples.append(snapshot(operator, workdir, n))
                print(json.dumps(samples[-1]), flush=True)
        finally:
            operator.stop()
            kubelet.stop()
    grew = growth(workdir, 0, args.batches - 1, args.top)
    deleted = args.jobs * (args.batches - 1)
    print(f"grew from batch 0 to batch {args.batches - 1} ({deleted} more jobs deleted):")
    for item in grew:
        print(f"  {item['kib']:9.1f} KiB {item['count']:+7d}  {item['where']}")
    if args.json:
        command = " ".join(["PYTHONPATH=. python benchmarks/operator_memory.py", *raw_argv])
        out = {"command": command, "samples": samples, "growth": grew, "deleted_between": deleted}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
