"""A soak: the operator under job churn and network faults for a long time, on a real control plane.

    PYTHONPATH=. python benchmarks/soak.py                          # 30 minutes
    PYTHONPATH=. python benchmarks/soak.py --minutes 120 --report-every 60 --json soak.json
    TRAINOP_SOAK_MINUTES=30 python -m pytest -m soak tests/stability/test_soak.py   # as a test

A fresh control plane (etcd, kube-apiserver v1.36.3, kube-controller-manager's garbage collector),
the kubelet stand-in (every pod runs `--run-seconds`; pods of jobs named ``*-fail-*`` exit 1) and
one operator process (``python -m trainop_core.operator``, its own ServiceAccount; /metrics over
plain HTTP on loopback, benchmarks/harness.py) that reaches the API server only through the fault
proxy (trainop_core/testing/faultproxy.py). For `--minutes`:

* churn: up to `--in-flight` jobs exist at once (PyTorchJob, TFJob, XGBoostJob taking turns, one
  in `--fail-every` meant to fail: restartPolicy Never, its pods exit 1), created at most
  `--rate` a second; each is deleted as soon as it is Succeeded or Failed (its pods and services
  then go with the garbage collector), so the operator sees create, run, succeed, fail and delete
  over and over;
* faults: every `--fault-every` seconds the next fault of a fixed cycle, on the operator's
  connections only: resets of the next requests, every open connection made half-open (a stall
  the operator must notice by itself), every open watch cut, 500s, 429s with Retry-After, and a
  pod create whose answer is lost after the server applied it;
* every `--report-every` seconds one line: the operator's RSS, its work-queue depth (its
  /metrics), its reconcile errors and error log lines, jobs done (succeeded, failed, deleted),
  jobs late (not finished `--job-timeout` after their create) or ended the wrong way.

At the end: the RSS slope over the second half (least squares, MB/hour) and a verdict: RSS is flat
when that slope is at most `--max-slope` MB/hour, and the soak passes when RSS is flat, the
operator is still alive and ready, no job ended the wrong way, none is late and no pod is left
once the last job is gone. Exit status 0 only then; `--json` writes every sample.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness

from trainop_core.crds import all_crds
from trainop_core.kinds.table import build_registry
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Kubelet, Rule
from trainop_core.testing.rest import Rest, RestError

KINDS = ("PyTorchJob", "TFJob", "XGBoostJob")
NS = harness.NAMESPACE
Obj = dict[str, Any]


# --- faults -------------------------------------------------------------------------------------
def fault_cycle(proxy: FaultProxy) -> list[tuple[str, Callable[[], object]]]:
    """The faults, in the order they come round (names as reported)."""
    return [
        ("reset", lambda: proxy.drop(count=5)),
        ("stall", lambda: proxy.stall()),
        ("cut-watches", lambda: proxy.cut_open_watches()),
        ("500", lambda: proxy.fail(code=500, count=5)),
        ("429", lambda: proxy.fail(code=429, count=5, retry_after=1)),
        ("lost-create", lambda: proxy.lose("create", "pods", count=1)),
    ]


# --- churn --------------------------------------------------------------------------------------
@dataclass
class Churn:
    """Keeps up to `in_flight` jobs alive: creates, and deletes each once it has ended."""

    rest: Rest
    workload: harness.Workload
    watch: harness.JobWatch
    in_flight: int
    rate: float
    fail_every: int
    job_timeout: float
    live: dict[str, tuple[str, bool, float]] = field(default_factory=dict)  # name: kind, fail, t
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    late: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def step(self) -> None:
        """Delete what ended, note what is late, create up to the limit (one per 1/rate s)."""
        now = time.monotonic()
        for name, (kind, fail, created) in list(self.live.items()):
            ended = self._outcome(name)
            if ended is not None:
                self._finish(name, kind, fail, ended)
            elif now - created > self.job_timeout and name not in self.late:
                self.late.add(name)
                self.problems.append(f"{name}: not ended {self.job_timeout:.0f} s after create")
        if len(self.live) < self.in_flight:
            self._create()

    def _outcome(self, name: str) -> str | None:
        if name in self.watch.succeeded:
            return "succeeded"
        if name in self.watch.failed:
            return "failed"
        return None

    def _finish(self, name: str, kind: str, fail: bool, ended: str) -> None:
        self.counts[ended] += 1
        if (ended == "failed") != fail:
            self.counts["wrong"] += 1
            self.problems.append(f"{name}: {ended}, meant to {'fail' if fail else 'succeed'}")
        try:
            self.rest.delete(self._path(kind, name), propagationPolicy="Background")
        except RestError as err:
            if err.status != 404:
                self.problems.append(f"{name}: delete: {err}")
                return
        self.counts["deleted"] += 1
        self.late.discard(name)
        del self.live[name]
        self.watch.succeeded.pop(name, None)
        self.watch.failed.pop(name, None)

    def _create(self) -> None:
        i = next(self._seq)
        kind = KINDS[i % len(KINDS)]
        fail = i % self.fail_every == self.fail_every - 1
        name = f"soak-{'fail' if fail else 'ok'}-{kind.lower()}-{i:06d}"
        manifest = harness.job_manifest(self.workload.registry, kind, name, self.workload.replicas)
        if fail:
            for spec in manifest["spec"][self.workload.registry.get(kind).replica_field].values():
                spec["restartPolicy"] = "Never"
        try:
            self.rest.create(self._path(kind), manifest)
        except RestError as err:
            self.problems.append(f"{name}: create: {err}")
            return
        self.counts["created"] += 1
        self.live[name] = (kind, fail, time.monotonic())

    def _path(self, kind: str, name: str = "") -> str:
        path = f"{harness.GROUP_PATH}/namespaces/{NS}/{self.workload.plural(kind)}"
        return f"{path}/{name}" if name else path

    def run(self, until: float, stop: threading.Event) -> None:
        while time.monotonic() < until and not stop.is_set():
            self.step()
            stop.wait(1.0 / self.rate)

    def drain(self, timeout: float) -> None:
        """Create nothing more; delete what ends, until nothing is left or `timeout`."""
        deadline = time.monotonic() + timeout
        while self.live and time.monotonic() < deadline:
            for name, (kind, fail, _) in list(self.live.items()):
                ended = self._outcome(name)
                if ended is not None:
                    self._finish(name, kind, fail, ended)
            time.sleep(0.5)


COUNTS = ("created", "succeeded", "failed", "deleted", "wrong")


# --- samples and the verdict --------------------------------------------------------------------
def slope_mb_per_hour(samples: list[Obj]) -> float:
    """Least-squares slope of RSS over time, MB per hour (0 with fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    ts = [s["t"] for s in samples]
    ys = [s["rss_mb"] for s in samples]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var * 3600


def error_lines(log: Path) -> int:
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if " ERROR " in line or line.startswith("Trace"))


def sample(t0: float, operator: harness.Process, churn: Churn, faults: dict[str, int]) -> Obj:
    memory = harness.memory_kb(operator.pid)
    return {
        "t": round(time.monotonic() - t0, 1),
        "rss_mb": round(memory["now"] / 1024, 2),
        "peak_mb": round(memory["peak"] / 1024, 2),
        "cpu_s": round(harness.cpu_seconds(operator.pid), 1),
        "queue": operator.queue_depth(),
        "reconcile_errors": operator.metric_sum("controller_runtime_reconcile_errors_total"),
        "error_lines": error_lines(operator.log),
        "live": len(churn.live),
        "late": len(churn.late),
        **churn.counts,
        "faults": sum(faults.values()),
    }


def print_sample(s: Obj) -> None:
    queue = "?" if s["queue"] is None else f"{s['queue']:.0f}"
    errors = "?" if s["reconcile_errors"] is None else f"{s['reconcile_errors']:.0f}"
    print(
        f"{s['t'] / 60:6.1f} min  rss {s['rss_mb']:7.1f} MB  cpu {s['cpu_s']:7.1f} s  "
        f"queue {queue:>3}  reconcile errors {errors:>4}  error lines {s['error_lines']:>4}  "
        f"jobs created {s['created']:>5} succeeded {s['succeeded']:>5} failed {s['failed']:>4} "
        f"deleted {s['deleted']:>5} live {s['live']:>3} late {s['late']:>2} wrong {s['wrong']}  "
        f"faults {s['faults']}",
        flush=True,
    )


def verdict(samples: list[Obj], args: argparse.Namespace, alive: bool, pods_left: int) -> Obj:
    half = samples[-1]["t"] / 2 if samples else 0.0
    second = [s for s in samples if s["t"] >= half]
    slope = slope_mb_per_hour(second)
    last = samples[-1] if samples else {}
    checks = {
        "rss flat": slope <= args.max_slope,
        "operator alive and ready": alive,
        "no job ended the wrong way": last.get("wrong", 0) == 0,
        "no job late": last.get("late", 0) == 0,
        "no pod left": pods_left == 0,
    }
    return {
        "rss_slope_second_half_mb_per_hour": round(slope, 2),
        "rss_slope_all_mb_per_hour": round(slope_mb_per_hour(samples), 2),
        "rss_first_mb": samples[0]["rss_mb"] if samples else None,
        "rss_last_mb": last.get("rss_mb"),
        "rss_max_mb": max((s["rss_mb"] for s in samples), default=None),
        "pods_left": pods_left,
        "checks": checks,
        "passed": all(checks.values()),
    }


# --- the run ------------------------------------------------------------------------------------
def soak(args: argparse.Namespace, workdir: Path) -> Obj:
    registry = build_registry(entry_points=False)
    workload = harness.Workload(registry, KINDS, args.replicas)
    crds = all_crds([registry.get(k) for k in KINDS])
    rules = [Rule("soak-fail-*", run_seconds=args.run_seconds, exit_code=1)]
    rules.append(Rule("*", run_seconds=args.run_seconds))
    with ControlPlane(crds=crds) as cp, FaultProxy.for_control_plane(cp) as proxy:
        cp.ensure_namespace(NS)
        token = cp.service_account_token(
            "trainop-system", "trainop-operator", cluster_roles=["cluster-admin"],
            expiration_seconds=24 * 3600,
        )  # fmt: skip
        kubeconfig = proxy.kubeconfig_for(token, workdir / "operator.kc")
        with Kubelet(cp, rules, namespace=NS, workers=4):
            operator = harness.start_trainop(
                "trainop", kubeconfig, KINDS, args.qps, args.burst, workdir
            )
            try:
                harness.wait_ready(operator)
                return _churn(args, cp, proxy, workload, operator)
            finally:
                operator.stop()


def _churn(
    args: argparse.Namespace,
    cp: ControlPlane,
    proxy: FaultProxy,
    workload: harness.Workload,
    operator: harness.Process,
) -> Obj:
    watch = harness.JobWatch(cp.rest, workload).start()
    churn = Churn(
        cp.rest, workload, watch, args.in_flight, args.rate, args.fail_every, args.job_timeout
    )
    faults: dict[str, int] = {}
    cycle = itertools.cycle(fault_cycle(proxy))
    stop = threading.Event()
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    samples: list[Obj] = []
    next_report, next_fault = t0, t0 + args.fault_every
    try:
        while time.monotonic() < end and operator.alive():
            now = time.monotonic()
            if now >= next_fault:
                name, inject = next(cycle)
                inject()
                faults[name] = faults.get(name, 0) + 1
                next_fault = now + args.fault_every * random.uniform(0.8, 1.2)
            elif now >= next_report:
                samples.append(sample(t0, operator, churn, faults))
                print_sample(samples[-1])
                next_report = now + args.report_every
            churn.run(min(next_report, next_fault, end), stop)
        proxy.clear()
        churn.drain(args.job_timeout)
        samples.append(sample(t0, operator, churn, faults))
        print_sample(samples[-1])
        alive = operator.alive() and operator.ready()
        pods_left = _wait_pods_gone(cp.rest, 120.0)
    finally:
        watch.stop()
    result = verdict(samples, args, alive, pods_left)
    return {
        "args": {k: str(v) for k, v in vars(args).items()},
        "faults": faults,
        "proxy_faults": {" ".join(k): v for k, v in proxy.stats.faults.items()},
        "problems": churn.problems[:50],
        "samples": samples,
        "verdict": result,
    }


def _wait_pods_gone(rest: Rest, timeout: float) -> int:
    """Pods left in the namespace once the garbage collector had `timeout` to remove them."""
    deadline = time.monotonic() + timeout
    while True:
        left = len(rest.get(f"/api/v1/namespaces/{NS}/pods").get("items") or [])
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--minutes", type=float, default=30.0, help="how long the churn lasts (default 30)")
    add("--report-every", type=float, default=60.0, metavar="SECONDS", help="default 60")
    add("--fault-every", type=float, default=30.0, metavar="SECONDS", help="default 30")
    add("--in-flight", type=int, default=10, help="jobs alive at once (default 10)")
    add("--rate", type=float, default=2.0, help="job creates a second at most (default 2)")
    add("--fail-every", type=int, default=4, help="one job in this many fails (default 4)")
    add("--replicas", type=int, default=2, help="pods per job (default 2)")
    add("--run-seconds", type=float, default=2.0, help="each pod runs this long (default 2)")
    add("--job-timeout", type=float, default=300.0, metavar="SECONDS", help="late after this")
    add("--max-slope", type=float, default=10.0, metavar="MB_PER_HOUR", help="flat RSS bound")
    add("--qps", type=int, default=20, help="the operator's --kube-api-qps (default 20)")
    add("--burst", type=int, default=30, help="the operator's --kube-api-burst (default 30)")
    add("--workdir", type=Path, default=None, help="logs here (default: a new temp dir)")
    add("--json", type=Path, default=None, help="write every sample and the verdict here")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.in_flight < 1 or args.fail_every < 1:
        parser.error("--minutes and --rate must be > 0, --in-flight and --fail-every >= 1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainop-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min, logs in {workdir}", flush=True)
    result = soak(args, workdir)
    for line in result["problems"]:
        print(f"problem: {line}")
    print(json.dumps(result["verdict"], indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
