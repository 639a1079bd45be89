"""One unified operator vs. four single-scheme operators, side by side on the same workload.

    PYTHONPATH=. python benchmarks/operator_scale.py                 # 400 jobs, 4 replicas each
    PYTHONPATH=. python benchmarks/operator_scale.py --jobs 1000 --replicas 5 --setups unified

Each setup gets a fresh in-process API server (trainop_core.testing) with the automatic kubelet
(every pod runs `--run-seconds`, then exits 0). The operators are real `python -m
trainop_core.operator` processes: "unified" is one process with the four schemes, "split" is four
processes with one scheme each (the world before unification). Jobs are written into the server's
store in-process, so every request the server counts was sent by an operator.

Printed per setup: watch connections, API requests by verb and writes per job (against the
minimum: one create per pod and per service, one status write per condition change), seconds
until every pod exists and until every job Succeeded, reconcile latency p50/p99 from the
operators' /metrics, the work-queue depth over time (backlog), and peak RSS (VmHWM) and CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.crds import all_crds
from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.testing import ApiServer, Kubelet, Rule

KINDS = ("TFJob", "PyTorchJob", "MXJob", "XGBoostJob")
SETUPS = {
    "unified": [[k.lower() for k in KINDS]],
    "split": [[k.lower()] for k in KINDS],
}
WRITE_VERBS = ("create", "update", "patch", "delete")
CONDITIONS_PER_JOB = 3  # Created, Running, Succeeded: one status write each at the minimum
REPO = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]


# --- the workload -------------------------------------------------------------------------------
def replica_counts(kind: str, replicas: int) -> dict[str, int]:
    """`replicas` pods per job, split over the kind's replica types as a user would."""
    if kind == "MXJob":
        return {"Scheduler": 1, "Server": 1, "Worker": max(1, replicas - 2)}
    if kind == "TFJob":
        return {"Worker": replicas}
    return {"Master": 1, "Worker": max(1, replicas - 1)}


def job_manifest(registry: KindRegistry, kind: str, name: str, replicas: int) -> Obj:
    k = registry.get(kind)
    container = {"name": k.default_container, "image": "busybox", "command": ["true"]}
    specs = {
        rtype: {"replicas": n, "template": {"spec": {"containers": [dict(container)]}}}
        for rtype, n in replica_counts(kind, replicas).items()
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": k.kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {k.replica_field: specs},
    }


class Submitter:
    """Writes the jobs, spread evenly over the kinds, into the store: all at once (`rate` <= 0)
    or `rate` jobs a second, to see whether a steady arrival builds up a backlog."""

    def __init__(self, server: ApiServer, registry: KindRegistry, args: argparse.Namespace) -> None:
        self.server, self.registry = server, registry
        self.jobs, self.replicas, self.rate = args.jobs, args.replicas, args.rate
        self.sent = 0
        kinds = [KINDS[i % len(KINDS)] for i in range(self.jobs)]
        self.pods = sum(sum(replica_counts(k, self.replicas).values()) for k in kinds)

    def due(self, elapsed: float) -> None:
        wanted = self.jobs if self.rate <= 0 else min(self.jobs, int(self.rate * elapsed) + 1)
        while self.sent < wanted:
            kind = KINDS[self.sent % len(KINDS)]
            manifest = job_manifest(self.registry, kind, f"{kind.lower()}-{self.sent:05d}",
                                    self.replicas)  # fmt: skip
            rt = self.server.store.resource(self.registry.get(kind).plural, "kubeflow.org")
            self.server.store.create(rt, "default", manifest)
            self.sent += 1


# --- operator processes -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Operator:
    schemes: list[str]
    process: subprocess.Popen[bytes]
    metrics_port: int
    probe_port: int

    def get(self, port: int, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return str(answer.read().decode())

    def ready(self) -> bool:
        try:
            self.get(self.probe_port, "/readyz")
            return True
        except OSError:
            return False

    def metrics(self) -> str:
        return self.get(self.metrics_port, "/metrics")

    def proc_status(self) -> dict[str, float]:
        """VmHWM/VmRSS in kB and CPU seconds of the process, from /proc."""
        lines = Path(f"/proc/{self.process.pid}/status").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in lines)
        stat = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return {
            "peak_rss_kb": int(fields["VmHWM"].split()[0]),
            "rss_kb": int(fields["VmRSS"].split()[0]),
            "cpu_seconds": (int(stat[11]) + int(stat[12])) / ticks,
        }


def start_operator(
    schemes: list[str], kubeconfig: Path, args: argparse.Namespace, log: Path
) -> Operator:
    metrics_port, probe_port = free_port(), free_port()
    command = [
        sys.executable, "-m", "trainop_core.operator", "--kubeconfig", str(kubeconfig),
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        f"--kube-api-qps={args.qps}", f"--kube-api-burst={args.burst}",
        f"--controller-threads={args.threads}", "--log-level=WARNING",
        *(f"--enable-scheme={s}" for s in schemes),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return Operator(schemes, process, metrics_port, probe_port)


def stop_operators(operators: list[Operator]) -> None:
    for op in operators:
        op.process.terminate()
    for op in operators:
        try:
            op.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            op.process.kill()
            op.process.wait()


# --- metrics parsing ----------------------------------------------------------------------------
def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of metric `name` in Prometheus text format."""
    found = []
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        labels = {}
        if "{" in head:
            for part in head[head.index("{") + 1 : head.rindex("}")].split(","):
                if "=" in part:
                    key, raw = part.split("=", 1)
                    labels[key.strip()] = raw.strip().strip('"')
        found.append((labels, float(value)))
    return found


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over cumulative bucket counts (upper bound -> count)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def reconcile_buckets(texts: list[str]) -> dict[float, float]:
    buckets: dict[float, float] = {}
    for text in texts:
        for labels, value in samples(text, "controller_runtime_reconcile_time_seconds_bucket"):
            bound = float(labels["le"].replace("+Inf", "inf"))
            buckets[bound] = buckets.get(bound, 0.0) + value
    return buckets


def queue_depth(operators: list[Operator]) -> float:
    total = 0.0
    for op in operators:
        with contextlib.suppress(OSError):  # an operator busy past the timeout: skip a sample
            total += sum(v for _, v in samples(op.metrics(), "workqueue_depth"))
    return total


# --- one setup ----------------------------------------------------------------------------------
@dataclass
class Result:
    setup: str
    processes: int
    jobs: int
    pods: int
    startup_requests: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)  # "verb resource" -> count
    watches_open: int = 0
    watches_opened: int = 0
    seconds_to_all_pods: float | None = None
    seconds_to_all_succeeded: float | None = None
    reconcile_p50: float = float("nan")
    reconcile_p99: float = float("nan")
    depth_samples: list[tuple[float, float]] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    cpu_seconds: float = 0.0


def counts(server: ApiServer, registry: KindRegistry) -> tuple[int, int]:
    """(pods that exist, jobs that Succeeded), read in-process from the store."""
    store = server.store
    pods = len(store.list(store.resource("pods"), "default").items)
    succeeded = 0
    for kind in KINDS:
        for job in store.list(
            store.resource(registry.get(kind).plural, "kubeflow.org"), None
        ).items:
            conditions = (job.get("status") or {}).get("conditions") or []
            succeeded += any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)
    return pods, succeeded


def wait_for_event_writes(server: ApiServer, quiet: float = 1.0, limit: float = 30.0) -> None:
    """Until no event has been written for `quiet` seconds (at most `limit`)."""
    deadline, last, last_change = time.monotonic() + limit, -1, time.monotonic()
    while time.monotonic() < deadline:
        written = server.stats.requests.get(("create", "events"), 0)
        if written != last:
            last, last_change = written, time.monotonic()
        elif time.monotonic() - last_change >= quiet:
            return
        time.sleep(0.1)


def by_verb_and_resource(server: ApiServer) -> dict[str, int]:
    return {f"{verb} {res}": n for (verb, res), n in sorted(server.stats.requests.items())}


def run_setup(name: str, args: argparse.Namespace, workdir: Path) -> Result:
    registry = build_registry(entry_points=False)
    with (
        ApiServer(history_size=200_000, bookmark_interval=30.0) as server,
        Kubelet(server, [Rule(run_seconds=args.run_seconds)]),
    ):
        crds = server.store.resource("customresourcedefinitions", "apiextensions.k8s.io")
        for crd in all_crds([registry.get(k) for k in KINDS]):
            server.store.create(crds, "", crd)
        kubeconfig = server.write_kubeconfig(workdir / f"{name}.kubeconfig")
        log = workdir / f"{name}.log"
        operators = [start_operator(s, kubeconfig, args, log) for s in SETUPS[name]]
        try:
            return measure(name, args, server, registry, operators)
        finally:
            stop_operators(operators)


def measure(
    name: str, args: argparse.Namespace, server: ApiServer, registry: KindRegistry,
    operators: list[Operator],
) -> Result:  # fmt: skip
    deadline = time.monotonic() + 120
    while not all(op.ready() for op in operators):
        if time.monotonic() > deadline or any(op.process.poll() is not None for op in operators):
            raise SystemExit(f"{name}: operators did not become ready (see {args.workdir})")
        time.sleep(0.2)
    result = Result(name, len(operators), args.jobs, 0)
    result.startup_requests = by_verb_and_resource(server)
    server.stats.requests.clear()
    opened_before = server.stats.total_watches
    submitter = Submitter(server, registry, args)
    result.pods = submitter.pods
    started = next_scrape = time.monotonic()
    while time.monotonic() - started < args.timeout:
        now = time.monotonic() - started
        submitter.due(now)
        pods, succeeded = counts(server, registry)
        result.watches_open = max(result.watches_open, server.stats.open_watches)
        if result.seconds_to_all_pods is None and pods >= result.pods:
            result.seconds_to_all_pods = now
        if succeeded >= args.jobs:
            result.seconds_to_all_succeeded = now
            break
        if time.monotonic() >= next_scrape:
            result.depth_samples.append((round(now, 1), queue_depth(operators)))
            next_scrape += args.scrape_every
        time.sleep(0.25)
    result.depth_samples.append((round(time.monotonic() - started, 1), queue_depth(operators)))
    wait_for_event_writes(server)  # events are written asynchronously, after the reconcile
    result.requests = by_verb_and_resource(server)
    result.watches_opened = server.stats.total_watches - opened_before
    buckets = reconcile_buckets([op.metrics() for op in operators])
    result.reconcile_p50 = histogram_quantile(0.50, buckets)
    result.reconcile_p99 = histogram_quantile(0.99, buckets)
    status = [op.proc_status() for op in operators]
    result.peak_rss_mb = sum(s["peak_rss_kb"] for s in status) / 1024
    result.cpu_seconds = sum(s["cpu_seconds"] for s in status)
    return result


# --- report -------------------------------------------------------------------------------------
def writes(result: Result) -> dict[str, float]:
    """Writes per job by resource and verb (every job kind's status counted as "status")."""
    per: Counter[str] = Counter()
    for key, n in result.requests.items():
        verb, resource = key.split(" ", 1)
        if verb not in WRITE_VERBS:
            continue
        per["status" if resource.endswith("/status") else f"{resource} {verb}"] += n
    return {k: round(v / max(result.jobs, 1), 2) for k, v in sorted(per.items())}


def verbs(requests: dict[str, int]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for key, n in requests.items():
        total[key.split(" ", 1)[0]] += n
    return dict(sorted(total.items()))


def fmt(value: float | None, unit: str = "s") -> str:
    return "not reached" if value is None else f"{value:.3f}{unit}" if unit == "s" else str(value)


def report(results: list[Result], args: argparse.Namespace) -> None:
    arrival = "all at once" if args.rate <= 0 else f"{args.rate:g} jobs/s"
    print(f"\n{args.jobs} jobs x {args.replicas} replicas ({len(KINDS)} kinds, {arrival}), "
          f"pods run {args.run_seconds}s, --kube-api-qps={args.qps} "
          f"--controller-threads={args.threads}")  # fmt: skip
    for r in results:
        pods_min = r.pods / max(r.jobs, 1)
        print(f"\n== {r.setup}: {r.processes} operator process(es) ==")
        print(f"  watch connections open (peak): {r.watches_open}   opened during run: "
              f"{r.watches_opened}   goal: {2 + len(KINDS)} (one per resource type)")  # fmt: skip
        print(f"  startup requests by verb:  {verbs(r.startup_requests)}")
        print(f"  run requests by verb:      {verbs(r.requests)}   per job: "
              f"{sum(r.requests.values()) / max(r.jobs, 1):.1f}")  # fmt: skip
        print(f"  writes per job:            {writes(r)}")
        print(f"    minimum:                 pods create {pods_min:g}, services create "
              f"{pods_min:g}, status <= {CONDITIONS_PER_JOB} (1/condition change)")  # fmt: skip
        print(f"  all {r.pods} pods exist after:   {fmt(r.seconds_to_all_pods)}")
        print(f"  all {r.jobs} jobs Succeeded after: {fmt(r.seconds_to_all_succeeded)}")
        print(f"  reconcile latency p50/p99: {r.reconcile_p50 * 1000:.1f} ms / "
              f"{r.reconcile_p99 * 1000:.1f} ms")  # fmt: skip
        print(f"  work-queue depth (t s, depth): {r.depth_samples}")
        print(f"  peak RSS: {r.peak_rss_mb:.1f} MiB   CPU: {r.cpu_seconds:.1f} s")
    by_name = {r.setup: r for r in results}
    if {"unified", "split"} <= by_name.keys():
        ratio = by_name["unified"].peak_rss_mb / max(by_name["split"].peak_rss_mb, 1e-9)
        print(f"\nRSS unified / split = {ratio:.2f} (goal <= 0.40)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400, help="jobs, spread over the 4 kinds")
    parser.add_argument("--replicas", type=int, default=4, help="pods per job")
    parser.add_argument("--rate", type=float, default=0, help="jobs/s to submit (0: all at once)")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="how long each pod runs")
    parser.add_argument("--setups", nargs="+", choices=sorted(SETUPS), default=["unified", "split"])
    parser.add_argument("--qps", type=float, default=0, help="--kube-api-qps (<= 0: unlimited)")
    parser.add_argument("--burst", type=int, default=30, help="--kube-api-burst")
    parser.add_argument("--threads", type=int, default=1, help="--controller-threads")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per setup")
    parser.add_argument("--scrape-every", type=float, default=5.0, help="queue-depth sampling")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--workdir", type=Path, help="kubeconfigs and operator logs (default: tmp)")
    args = parser.parse_args(argv)
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="operator-scale-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.setups:
        print(f"running {name} ...", flush=True)
        results.append(run_setup(name, args, args.workdir))
    report(results, args)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
