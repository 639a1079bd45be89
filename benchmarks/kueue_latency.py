"""Kueue admitting jobs to trainop's operator and to Kubeflow's Go operator, side by side.

    PYTHONPATH=. python benchmarks/kueue_latency.py                  # 20 jobs each, ~3 min
    PYTHONPATH=. python benchmarks/kueue_latency.py --jobs 40 --rounds 3 --json out.json

Each setup gets a fresh control plane (etcd + kube-apiserver v1.36.3), real Kueue
(trainop_core.testing.kueue: built from the Go module proxy, cached) with a ClusterQueue whose CPU
quota holds `--quota` jobs, the kubelet stand-in in its own process (every pod runs
`--run-seconds` and exits 0) and one operator process: trainop (``python -m
trainop_core.operator``) or upstream v1.9.3 (benchmarks/upstream_operator.py builds it), started
exactly as benchmarks/operator_vs_upstream.py starts them. `--jobs` PyTorchJobs (a master and a
worker, 500m CPU each) are created at once with the queue label; Kueue suspends them at creation
and admits them as quota frees.

Clocks, all read by this process from one watch of the jobs: *admitted* is the first version with
``runPolicy.suspend: false`` (Kueue's admission write), *running* the first with the Running
condition true (the operator saw its pods run), *done* the first Succeeded. Prints per setup the
admission-to-running latency (p50, p95, max: what the operator adds between Kueue's admission and
running pods, the stand-in's start included), admission-to-done, the wall time from the first
create to the last Succeeded, and the most jobs seen running at once (must not exceed --quota).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import audit
import audit_timeline
import harness
import operator_vs_upstream as ovu
import upstream_operator as upstream

from trainop_core.crds import all_crds
from trainop_core.kinds.table import build_registry
from trainop_core.testing.binaries import KUBERNETES_VERSION, kubernetes_binaries
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.kueue import (
    API,
    KUEUE_VERSION,
    QUEUE_LABEL,
    Kueue,
    kueue_binary,
    kueue_crds,
)

Obj = dict[str, Any]
KINDS = ("PyTorchJob",)
QUEUE = "bench"


class QueuedJobWatch(harness.JobWatch):
    """Also notes when each job is first seen admitted (unsuspended) and first seen Running."""

    def __init__(self, rest: Any, workload: harness.Workload) -> None:
        super().__init__(rest, workload)
        self.admitted: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.peak_running = 0
        self.epoch = time.time() - time.monotonic()  # monotonic + epoch: the audit log's clock

    def _see(self, job: Obj) -> None:
        now, name = time.monotonic(), job["metadata"]["name"]
        conditions = {
            c.get("type"): c.get("status")
            for c in (job.get("status") or {}).get("conditions") or []
        }
        with self._changed:
            if (job["spec"].get("runPolicy") or {}).get("suspend") is False:
                self.admitted.setdefault(name, now)
            if conditions.get("Running") == "True":
                self.running.setdefault(name, now)
            active = set(self.running) - set(self.succeeded) - {name}
            if conditions.get("Running") == "True":
                active.add(name)
            self.peak_running = max(self.peak_running, len(active))
        super()._see(job)


def queue_objects(quota: str) -> list[tuple[str, Obj]]:
    flavor = {"metadata": {"name": "default"}, "spec": {}}
    cluster_queue = {
        "metadata": {"name": "cq"},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": quota}]}
                    ],
                }
            ],
        },
    }
    local = {"metadata": {"name": QUEUE}, "spec": {"clusterQueue": "cq"}}
    return [
        (f"{API}/resourceflavors", {"kind": "ResourceFlavor", **flavor}),
        (f"{API}/clusterqueues", {"kind": "ClusterQueue", **cluster_queue}),
        (f"{API}/namespaces/{harness.NAMESPACE}/localqueues", {"kind": "LocalQueue", **local}),
    ]


def queued_jobs(workload: harness.Workload, prefix: str, count: int) -> list[tuple[str, Obj]]:
    """`count` PyTorchJobs (master + worker, 500m each) carrying the queue label."""
    jobs = workload.jobs(prefix, count)
    for _, manifest in jobs:
        manifest["metadata"]["labels"] = {QUEUE_LABEL: QUEUE}
        for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
            requests = {"cpu": "500m"}
            spec["template"]["spec"]["containers"][0]["resources"] = {
                "requests": requests,
                "limits": requests,
            }
    return jobs


def run_setup(operator: str, args: argparse.Namespace, round_: int, kueue: Path) -> Obj:
    workdir = args.workdir / f"round{round_}-{operator}"
    workdir.mkdir(parents=True, exist_ok=True)
    registry = build_registry(entry_points=False)
    workload = harness.Workload(registry, KINDS, 2)
    crds = all_crds(registry.kinds) + kueue_crds()
    flags = audit.audit_flags(workdir) if args.audit else []
    with ControlPlane(
        binaries=kubernetes_binaries(), controller_manager=False, crds=crds, apiserver_flags=flags
    ) as cp:
        cp.ensure_namespace(harness.NAMESPACE)
        with Kueue(cp, binary=kueue) as running_kueue:
            running_kueue.serve_namespace(harness.NAMESPACE)
            for path, body in queue_objects(str(args.quota)):
                cp.rest.create(path, {"apiVersion": "kueue.x-k8s.io/v1beta2", **body})
            kubelet = harness.start_kubelet(cp, args.run_seconds, 4, workdir)
            setup = ovu.Setup("v1.9", operator, upstream.LATEST, KINDS, "raised", args.jobs, 0)
            operators: list[harness.Process] = []
            try:
                operators, user = ovu.start_operators(cp, setup, args, workdir)
                result = measure(operator, args, cp, workload, round_)
                jobs, watched = set(result.pop("names")), result.pop("watched")
                if args.audit:
                    log = workdir / "audit.log"
                    result["audit"] = audit_timeline.summary(log, jobs, user)
                    result["timelines"] = audit_timeline.timelines(log, jobs, user)
                    for name, points in result["timelines"].items():
                        points.update(watched.pop(name))
                return result
            finally:
                for process in [*operators, kubelet]:
                    process.stop()


def measure(
    operator: str, args: argparse.Namespace, cp: ControlPlane, workload: harness.Workload, r: int
) -> Obj:
    jobs = queued_jobs(workload, f"r{r}", args.jobs)
    load_before = os.getloadavg()[0]
    watch = QueuedJobWatch(cp.rest, workload).start()
    try:
        started = time.monotonic()
        submitter = harness.Submitter(cp.rest, workload, jobs, rate=0).start()
        submitter.join()
        names = {manifest["metadata"]["name"] for _, manifest in jobs}
        finished = watch.wait(names, timeout=args.timeout)
        wall = time.monotonic() - started
    finally:
        watch.stop()
    if not finished or watch.failed or submitter.errors:
        missing = names - watch.succeeded.keys()
        raise SystemExit(f"{operator}: not all jobs succeeded: {missing} {watch.failed}")
    to_running = [watch.running[n] - watch.admitted[n] for n in names]
    to_done = [watch.succeeded[n] - watch.admitted[n] for n in names]
    return {
        "operator": operator,
        "round": r,
        "jobs": len(names),
        "wall_s": wall,
        "admitted_to_running_s": _summary(to_running),
        "admitted_to_succeeded_s": _summary(to_done),
        "peak_jobs_running": watch.peak_running,
        "load_avg_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "names": sorted(names),
        "watched": {n: watch_times(watch, n) for n in names},
    }


def watch_times(watch: QueuedJobWatch, name: str) -> dict[str, float]:
    """When the benchmark's watch saw `name` admitted and Running, on the audit log's clock."""
    return {
        "watch_admitted": watch.admitted[name] + watch.epoch,
        "watch_running": watch.running[name] + watch.epoch,
    }


def _summary(values: list[float]) -> Obj:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def table(results: list[Obj]) -> str:
    rows = [["operator", "round", "jobs", "wall s", "admit->Running p50/p95/max s",
             "admit->Succeeded p50/p95/max s", "peak running jobs"]]  # fmt: skip
    for r in results:
        run, done = r["admitted_to_running_s"], r["admitted_to_succeeded_s"]
        rows.append([
            r["operator"], str(r["round"]), str(r["jobs"]), f"{r['wall_s']:.1f}",
            f"{run['p50']:.2f} / {run['p95']:.2f} / {run['max']:.2f}",
            f"{done['p50']:.2f} / {done['p95']:.2f} / {done['max']:.2f}",
            str(r["peak_jobs_running"]),
        ])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs per setup (default 20)")
    parser.add_argument("--quota", type=int, default=2, help="CPUs in the ClusterQueue (2)")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="each pod's run (1 s)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; the order flips each (1)")
    parser.add_argument(
        "--operators", default="trainop,upstream", help="comma-separated setups (trainop,upstream)"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds a setup's jobs may take (600)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--audit", action="store_true", help="log every request; add where each job's time went"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="logs and audit logs (default: a new temp dir)"
    )
    parser.add_argument(
        "--trainop-flag", dest="trainop_flags", action="append", default=[],
        help="an extra flag for trainop's operator, e.g. --trainop-flag=--log-level=DEBUG",
    )  # fmt: skip
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw_argv)
    ovu.trainop_revision()  # what runs, before anything can change it
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kueue-latency-"))
    started = time.monotonic()
    kueue = kueue_binary(build=True)
    print(f"Kueue {KUEUE_VERSION} ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    operators = args.operators.split(",")
    results = []
    for round_ in range(args.rounds):
        order = operators if round_ % 2 == 0 else operators[::-1]
        for operator in order:
            results.append(run_setup(operator, args, round_, kueue))
            print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            if args.audit:
                print(json.dumps(results[-1]["audit"]), file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(document(args, raw_argv, results), indent=2))
    return 0


def document(args: argparse.Namespace, raw_argv: list[str], results: list[Obj]) -> Obj:
    """What `--json` writes: the command, when and where it ran (as operator_vs_upstream.py
    records them; benchmarks/plot.py draws only dated results), the versions and the results."""
    return {
        "command": " ".join(["PYTHONPATH=. python benchmarks/kueue_latency.py", *raw_argv]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": ovu.machine(),
        "versions": {
            "trainop": ovu.trainop_revision(),
            "upstream": upstream.LATEST,
            "kubernetes": KUBERNETES_VERSION,
        },
        "kueue": KUEUE_VERSION,
        "workload": {key: getattr(args, key) for key in ("jobs", "quota", "run_seconds", "rounds")},
        "results": results,
    }


if __name__ == "__main__":
    sys.exit(main())
