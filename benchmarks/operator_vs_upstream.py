"""trainop's operator against Kubeflow's Go training operator, on the same real control plane.

    PYTHONPATH=. python benchmarks/operator_vs_upstream.py        # 3 rounds, ~20 min on 2 cores
    PYTHONPATH=. python benchmarks/operator_vs_upstream.py --rounds 1 --jobs 30 --no-mxjob
    PYTHONPATH=. python benchmarks/operator_vs_upstream.py --operators trainop --jobs 1000 \\
        --replicas 5 --limits raised --rate 2 --rounds 1 --no-mxjob \\
        --json benchmarks/results/scale_trainop.json
    PYTHONPATH=. python benchmarks/operator_vs_upstream.py --rounds 2 --no-mxjob --saturate 300
    PYTHONPATH=. python benchmarks/operator_vs_upstream.py --jobs 10000 --replicas 5 \\
        --limits raised --rate 4 --rounds 1 --no-mxjob --ttl 0 --timeout 5400 \\
        --scrape-every 10 --kubelet-workers 8 --json benchmarks/results/issue36_scale.json

Each setup gets a fresh control plane (etcd, kube-apiserver v1.36.3 with an audit log; see
benchmarks/audit.py), the kubelet stand-in in its own process (every pod runs `--run-seconds`
and exits 0), and one operator process: trainop (``python -m trainop_core.operator``) or
upstream's binary (benchmarks/upstream_operator.py builds it from the Go module proxy). Each
operator acts as its own ServiceAccount (bound to cluster-admin), so the audit log tells its
requests apart. Both see the same CRDs (trainop's, which carry upstream's schema), the same jobs,
created at the same rate by the admin, and the same stand-in. Upstream runs with its webhook
out of the way (upstream_operator.py says how): no admission request reaches either operator.
The control plane's binaries and upstream's are built (Go module proxy, per-machine cache) before
the first setup when this machine has none yet.

Comparisons: ``v1.9`` (PyTorchJob, TFJob, XGBoostJob; upstream v1.9.3) at upstream's default client
limits (QPS 20, burst 30) and raised (QPS 1000, burst 2000), and ``v1.8-mxjob`` (the same plus
MXJob; upstream v1.8.1, which has no flags for them: 20/30 per resource type). ``--saturate N``
adds ``v1.9-saturating``: N jobs created at once (as fast as the admin's client can), raised
limits, to show which operator runs out first (its CPU share of a core, the deepest work queue,
jobs/s and latency once the backlog is worked off). Setups alternate
within each round and the order flips every round; a warm-up of `--warmup` jobs per kind precedes
every measured run and is excluded. ``--split`` adds, as a secondary line, a trainop process per
kind (three in the v1.9 comparison).

Per setup: wall time from the first create to the last Succeeded, jobs/s, create->Succeeded
latency p50/p95, the operator's API requests per job by verb and resource (audit log), watches it
opened and holds open, its CPU seconds per job and peak RSS (VmHWM), the deepest work queue seen
on its /metrics, and the CPU seconds and peak RSS of kube-apiserver, etcd and the kubelet
stand-in. Every `--scrape-every` seconds the run samples the work-queue depth, the operators' RSS
and the jobs finished, so a long run (`--ttl`: jobs deleted as they finish) shows whether memory
grows with the jobs done. Prints a
table per comparison (each round and the median) and writes everything as JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import audit
import harness
import report
import upstream_operator as upstream

from trainop_core.crds import all_crds
from trainop_core.kinds.table import build_registry
from trainop_core.testing.binaries import KUBERNETES_VERSION, kubernetes_binaries
from trainop_core.testing.controlplane import ControlPlane

LIMITS = {"default": (20, 30), "raised": (1000, 2000)}
TRAINOP_SA = ("trainop-system", "trainop-operator")
UPSTREAM_SA = (upstream.OPERATOR_NAMESPACE, "training-operator")
KINDS_19 = ("PyTorchJob", "TFJob", "XGBoostJob")
KINDS_18 = (*KINDS_19, "MXJob")
Obj = dict[str, Any]


@dataclass(frozen=True)
class Setup:
    comparison: str  # "v1.9", "v1.9-saturating" or "v1.8-mxjob"
    operator: str  # "trainop", "upstream" or "trainop-split"
    version: str  # upstream's version (trainop: the version it is compared with)
    kinds: tuple[str, ...]
    limits: str  # "default" or "raised"
    jobs: int  # measured jobs
    rate: float  # jobs created a second (<= 0: all at once)

    @property
    def name(self) -> str:
        label = f"{self.operator} {self.version}" if self.operator == "upstream" else self.operator
        return f"{label} ({self.limits})"

    @property
    def slug(self) -> str:
        return f"{self.comparison}-{self.operator}-{self.limits}"


def setups(args: argparse.Namespace) -> list[Setup]:
    paced = (args.jobs, args.rate)
    out = []
    for limits in args.limits:
        for operator in args.operators:
            out.append(Setup("v1.9", operator, upstream.LATEST, KINDS_19, limits, *paced))
        if args.split:
            out.append(Setup("v1.9", "trainop-split", upstream.LATEST, KINDS_19, limits, *paced))
    if args.saturate:
        burst = (args.saturate, 0.0)
        for operator in args.operators:
            out.append(
                Setup("v1.9-saturating", operator, upstream.LATEST, KINDS_19, "raised", *burst)
            )
    if args.mxjob:
        for operator in args.operators:
            out.append(
                Setup("v1.8-mxjob", operator, upstream.WITH_MXJOB, KINDS_18, "default", *paced)
            )
    return out


# --- one setup ----------------------------------------------------------------------------------
def run_setup(setup: Setup, args: argparse.Namespace, round_: int) -> Obj:
    workdir = args.workdir / f"round{round_}-{setup.slug}"
    workdir.mkdir(parents=True, exist_ok=True)
    registry = build_registry(entry_points=False)
    ttl = getattr(args, "ttl", None)
    workload = harness.Workload(registry, setup.kinds, args.replicas, ttl)
    crds = all_crds([registry.get(k) for k in setup.kinds])
    flags = audit.audit_flags(workdir)
    # A deleted job's pods and Services go only with the garbage collector, as on a cluster. At
    # kube-controller-manager's default client limits (20/s, burst 30) it deletes ~16 children a
    # second and fell behind 4 jobs/s of 5 pods and 5 Services (11,441 pods left after 14 min):
    # both operators' pod caches then grow with pods of deleted jobs. Raised, as a cluster
    # running this many jobs would.
    gc = ttl is not None
    manager_flags = ["--kube-api-qps=500", "--kube-api-burst=1000"]
    with ControlPlane(
        controller_manager=gc,
        controller_manager_flags=manager_flags,
        apiserver_flags=flags,
        crds=crds,
    ) as cp:
        cp.ensure_namespace(harness.NAMESPACE)
        log = audit.AuditLog(workdir / "audit.log")
        kubelet = harness.start_kubelet(
            cp, args.run_seconds, args.kubelet_workers, workdir, getattr(args, "pod_log", "")
        )
        operators: list[harness.Process] = []
        try:
            operators, user = start_operators(cp, setup, args, workdir)
            return measure(setup, args, cp, log, workload, operators, kubelet, user, workdir)
        finally:
            for process in [*operators, kubelet]:
                process.stop()


def start_operators(
    cp: ControlPlane, setup: Setup, args: argparse.Namespace, workdir: Path
) -> tuple[list[harness.Process], str]:
    qps, burst = LIMITS[setup.limits]
    if setup.operator == "upstream":
        namespace, name = UPSTREAM_SA
        for path, body in upstream.webhook_setup():
            _create_or_keep(cp, path, body)
        kubeconfig = cp.kubeconfig_for(_token(cp, namespace, name), workdir / "operator.kc")
        binary = upstream.upstream_binary(setup.version, build=True)
        shutil.rmtree(upstream.CERT_DIR, ignore_errors=True)  # no certificate of an earlier run
        limits = (qps, burst) if setup.version != upstream.WITH_MXJOB else None
        process = harness.start_upstream(
            "upstream", binary, kubeconfig, setup.kinds, limits, workdir
        )
        harness.wait_ready(process, while_waiting=lambda: _mount_certs(cp))
        return [process], f"system:serviceaccount:{namespace}:{name}"
    namespace, name = TRAINOP_SA
    kubeconfig = cp.kubeconfig_for(_token(cp, namespace, name), workdir / "operator.kc")
    groups = [(k,) for k in setup.kinds] if setup.operator == "trainop-split" else [setup.kinds]
    flags = tuple(getattr(args, "trainop_flags", ()))
    processes = [
        harness.start_trainop(f"trainop-{i}", kubeconfig, kinds, qps, burst, workdir, flags)
        for i, kinds in enumerate(groups)
    ]
    for process in processes:
        harness.wait_ready(process)
    return processes, f"system:serviceaccount:{namespace}:{name}"


def _token(cp: ControlPlane, namespace: str, name: str) -> str:
    return cp.service_account_token(
        namespace, name, cluster_roles=["cluster-admin"], expiration_seconds=24 * 3600
    )


def _create_or_keep(cp: ControlPlane, path: str, body: Obj) -> None:
    from trainop_core.testing.rest import RestError

    try:
        cp.rest.create(path, body)
    except RestError as err:
        if err.status != 409:
            raise


def _mount_certs(cp: ControlPlane) -> None:
    secret = cp.rest.get(
        f"/api/v1/namespaces/{upstream.OPERATOR_NAMESPACE}/secrets/{upstream.SECRET_NAME}"
    )
    if not (upstream.CERT_DIR / "tls.crt").exists():
        upstream.mount_serving_certs(secret)


def measure(
    setup: Setup,
    args: argparse.Namespace,
    cp: ControlPlane,
    log: audit.AuditLog,
    workload: harness.Workload,
    operators: list[harness.Process],
    kubelet: harness.Process,
    user: str,
    workdir: Path,
) -> Obj:
    watch = harness.JobWatch(cp.rest, workload).start()
    pods = harness.PodWatch(cp.rest, workload) if args.all_running else None
    if pods is not None:
        pods.start()
    try:
        warm = workload.jobs("warmup", args.warmup * len(workload.kinds))
        harness.Submitter(cp.rest, workload, warm, 0).start().join()
        if not watch.wait({m["metadata"]["name"] for _, m in warm}, 300):
            raise SystemExit(f"{setup.name}: warm-up jobs did not finish (see {workdir})")
        wait_quiet(log, user, quiet=2.0, limit=30.0)
        servers = {name: p.pid for name, p in cp.processes.items()}
        server_cpu = {name: harness.cpu_seconds(pid) for name, pid in servers.items()}
        for process in [*operators, kubelet]:
            process.mark_cpu()
        reconciles = reconcile_count(operators)
        log.mark()
        load = os.getloadavg()[0]
        profilers = start_profilers(operators, args, workdir) if args.profile else []
        jobs = workload.jobs("job", setup.jobs)
        names = {m["metadata"]["name"] for _, m in jobs}
        submitter = harness.Submitter(cp.rest, workload, jobs, setup.rate).start()
        depths, rss, done = follow(watch, names, operators, args)
        submitter.join()
        wait_quiet(log, user, quiet=3.0, limit=60.0)
        stop_profilers(profilers)
        requests = log.window()
        result = figures(setup, workload, watch, submitter, names, requests, user, depths)
        result["operator_rss_samples"] = rss
        result["done_samples"] = done
        result["submit_seconds"] = submitter.seconds
        result["operator_cpu_seconds"] = sum(p.cpu_since_mark() for p in operators)
        result["operator_peak_rss_mib"] = sum(harness.memory_kb(p.pid)["peak"] for p in operators)
        result["operator_peak_rss_mib"] /= 1024
        result["operator_processes"] = len(operators)
        result["kubelet_cpu_seconds"] = kubelet.cpu_since_mark()
        result["server_cpu_seconds"] = {
            name: harness.cpu_seconds(pid) - server_cpu[name] for name, pid in servers.items()
        }
        result["server_peak_rss_mib"] = {
            name: harness.memory_kb(pid)["peak"] / 1024 for name, pid in servers.items()
        }
        result["kubelet_peak_rss_mib"] = harness.memory_kb(kubelet.pid)["peak"] / 1024
        result["load_1min_at_start"] = load
        result["load_1min_at_end"] = os.getloadavg()[0]
        result["profiles"] = [str(p[1]) for p in profilers]
        result["events_by_reason_per_job"] = events_by_reason(cp, names)
        result["reconciles_per_job"] = (reconcile_count(operators) - reconciles) / len(names)
        if pods is not None:
            width = {
                m["metadata"]["name"]: sum(harness.replica_counts(k, workload.replicas).values())
                for k, m in jobs
            }
            result.update(all_running(pods, submitter, width))
        return result
    finally:
        watch.stop()
        if pods is not None:
            pods.stop()


def all_running(pods: harness.PodWatch, submitter: harness.Submitter, width: dict[str, int]) -> Obj:
    """From each job's creation until every one of its pods was seen Running: no rank of a
    distributed job moves before (PyTorch's rendezvous waits for the world)."""
    waits = []
    for name, replicas in width.items():
        running = pods.all_running(name, replicas)
        if running is not None and name in submitter.created:
            waits.append(running - submitter.created[name])
    waits.sort()
    return {
        "all_running_jobs": len(waits),
        "all_running_p50": _quantile(waits, 0.50),
        "all_running_p95": _quantile(waits, 0.95),
    }


Samples = list[tuple[float, float]]


def follow(
    watch: harness.JobWatch,
    names: set[str],
    operators: list[harness.Process],
    args: argparse.Namespace,
) -> tuple[Samples, Samples, Samples]:
    """Wait for every job, sampling every `--scrape-every` seconds the operators' work-queue
    depth, their RSS (MiB, summed) and how many jobs have finished: three lists of (seconds,
    value), so a long run shows whether the queue or the memory grows with the jobs done."""
    started, depths, rss, done = time.monotonic(), [], [], []
    while not watch.wait(names, args.scrape_every):
        at = round(time.monotonic() - started, 1)
        depth = [d for d in (p.queue_depth() for p in operators) if d is not None]
        depths.append((at, sum(depth)))
        rss.append((at, round(sum(harness.memory_kb(p.pid)["now"] for p in operators) / 1024, 1)))
        done.append((at, float(len(names & (watch.succeeded.keys() | watch.failed.keys())))))
        if time.monotonic() - started > args.timeout:
            print(f"  timed out: {len(watch.succeeded)} of {len(names)} Succeeded", flush=True)
            break
    return depths, rss, done


def reconcile_count(operators: list[harness.Process]) -> float:
    """Reconciles of the job controllers so far (controller-runtime's metric, which both
    operators serve; upstream's cert-rotator controller is left out)."""
    total = 0.0
    for process in operators:
        every = process.metric_sum("controller_runtime_reconcile_total") or 0.0
        total += every - (process.metric_sum("controller_runtime_reconcile_total", "cert") or 0.0)
    return total


def wait_quiet(log: audit.AuditLog, user: str, quiet: float, limit: float) -> None:
    """Until the operator has sent no request for `quiet` seconds (events are written late)."""
    deadline, last, since = time.monotonic() + limit, -1, time.monotonic()
    while time.monotonic() < deadline:
        requests = log.window().get(user)
        total = requests.total if requests else 0
        if total != last:
            last, since = total, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.5)


def figures(
    setup: Setup,
    workload: harness.Workload,
    watch: harness.JobWatch,
    submitter: harness.Submitter,
    names: set[str],
    requests: dict[str, audit.Requests],
    user: str,
    depths: list[tuple[float, float]],
) -> Obj:
    done = {n: watch.succeeded[n] for n in names if n in watch.succeeded}
    latencies = sorted(done[n] - submitter.created[n] for n in done if n in submitter.created)
    started = min(submitter.created.values())
    wall = max(done.values()) - started if len(done) == len(names) else None
    mine = requests.get(user, audit.Requests())
    jobs = len(names)
    return {
        "setup": setup.name,
        "comparison": setup.comparison,
        "operator": setup.operator,
        "upstream_version": setup.version,
        "limits": dict(zip(("qps", "burst"), LIMITS[setup.limits], strict=True)),
        "kinds": list(setup.kinds),
        "jobs": jobs,
        "pods": workload.pods(jobs),
        "succeeded": len(done),
        "failed": len([n for n in names if n in watch.failed]),
        "submit_errors": submitter.errors[:5],
        "wall_seconds": wall,
        "jobs_per_second": jobs / wall if wall else None,
        "latency_p50": _quantile(latencies, 0.50),
        "latency_p95": _quantile(latencies, 0.95),
        "requests_per_job": mine.total / jobs,
        "requests": dict(sorted(mine.by_verb_resource.items())),
        "requests_by_verb_per_job": {k: v / jobs for k, v in mine.by_verb().items()},
        "watches_opened": mine.watches_opened,
        "watches_open": mine.watches_open,
        "watches_open_by_resource": dict(sorted(mine.watch_resources.items())),
        "queue_depth_max": max((d for _, d in depths), default=0.0),
        "queue_depth_samples": depths,
        "others": {u: r.total for u, r in requests.items() if u != user},
    }


def events_by_reason(cp: ControlPlane, names: set[str]) -> dict[str, float]:
    """Events about the measured jobs that reached the server, by reason, per job (an event
    aggregated by its recorder counts as often as its `count` says it happened)."""
    reasons: dict[str, float] = {}
    listed = cp.rest.get(f"/api/v1/namespaces/{harness.NAMESPACE}/events")
    for event in listed.get("items") or []:
        if event.get("involvedObject", {}).get("name") in names:
            reason = str(event.get("reason", ""))
            reasons[reason] = reasons.get(reason, 0) + 1 / len(names)
    return dict(sorted(reasons.items()))


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


# --- profiling ----------------------------------------------------------------------------------
def start_profilers(
    operators: list[harness.Process], args: argparse.Namespace, workdir: Path
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """py-spy record (collapsed stacks) of every trainop process, until stop_profilers."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("--profile needs py-spy (pip install -e '.[bench]')")
    out = []
    for process in operators:
        if not process.name.startswith("trainop"):
            continue
        target = workdir / f"{process.name}.collapsed"
        argv = [py_spy, "record", "--pid", str(process.pid), "--rate", "100", "--format", "raw",
                "--output", str(target), "--threads", "--gil"]  # fmt: skip
        log = (workdir / "py-spy.log").open("ab")
        out.append((subprocess.Popen(argv, stdout=log, stderr=log), target))
    return out


def stop_profilers(profilers: list[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for popen, _ in profilers:
        popen.send_signal(signal.SIGINT)
    for popen, _ in profilers:
        try:
            popen.wait(60)
        except subprocess.TimeoutExpired:
            popen.kill()


# --- the run ------------------------------------------------------------------------------------
def machine() -> Obj:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


@functools.cache
def trainop_revision() -> str:
    """The checkout's revision when first asked: every benchmark's main asks at its start, so a
    results file names the code that ran, not a commit made while a long run went on (the
    10,000-job run took 95 minutes)."""
    try:
        return subprocess.run(
            ["git", "-C", str(harness.REPO), "describe", "--always", "--dirty"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def workload_flags(parser: argparse.ArgumentParser, rounds: int, timeout: float) -> Any:
    """The workload's flags, shared with benchmarks/progress_cost.py; `parser.add_argument`."""
    add = parser.add_argument
    add("--jobs", type=int, default=60, help="measured jobs per setup (kinds take turns)")
    add("--replicas", type=int, default=4, help="pods per job")
    add("--rate", type=float, default=5.0, help="jobs created per second (<= 0: at once)")
    add("--rounds", type=int, default=rounds, help="rounds; setups alternate, order flips each")
    add("--warmup", type=int, default=1, help="warm-up jobs per kind before each measured run")
    add("--run-seconds", type=float, default=5.0, help="how long every pod runs")
    add("--kubelet-workers", type=int, default=4, help="the stand-in's writer threads")
    add("--scrape-every", type=float, default=2.0, help="seconds between queue-depth samples")
    add("--timeout", type=float, default=timeout, help="seconds a measured run may take")
    return add


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = workload_flags(parser, rounds=3, timeout=1800.0)
    add(
        "--limits",
        nargs="*",
        choices=sorted(LIMITS),
        default=["default", "raised"],
        help="client limits",
    )
    add(
        "--operators",
        nargs="+",
        choices=["trainop", "upstream"],
        default=["trainop", "upstream"],
        help="setups",
    )
    add("--no-mxjob", dest="mxjob", action="store_false", help="skip the v1.8.1 MXJob comparison")
    add("--split", action="store_true", help="add a trainop process per kind (a secondary line)")
    saturate = "add the saturating comparison: N jobs created at once, raised limits (0: off)"
    add("--saturate", type=int, default=0, metavar="N", help=saturate)
    running = "also time each job from its creation until all its pods run (a pod watch)"
    add("--all-running", action="store_true", help=running)
    add("--profile", action="store_true", help="py-spy record every trainop operator")
    ttl = (
        "every job's runPolicy.ttlSecondsAfterFinished: the operator deletes it that long after "
        "it finished, kube-controller-manager's garbage collector its pods (default: jobs kept)"
    )
    add("--ttl", type=int, metavar="SECONDS", help=ttl)
    add(
        "--json",
        type=Path,
        default=harness.REPO / "benchmarks/results/operator_vs_upstream.json",
        help="results file",
    )
    add("--workdir", type=Path, help="logs, audit logs, profiles (default: a new temp dir)")
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw_argv)
    trainop_revision()  # what runs, before anything can change it
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="operator-vs-upstream-"))
    print(f"work dir: {args.workdir}", flush=True)
    kubernetes_binaries(build=True)  # the control plane's, as scripts/check builds them
    for version in {s.version for s in setups(args) if s.operator == "upstream"}:
        upstream.upstream_binary(version)  # build before the clock starts
    results: list[Obj] = []
    plan = setups(args)
    for round_ in range(args.rounds):
        order = plan if round_ % 2 == 0 else list(reversed(plan))
        for setup in order:
            print(f"round {round_ + 1}: {setup.comparison} {setup.name} ...", flush=True)
            result = run_setup(setup, args, round_)
            result["round"] = round_ + 1
            results.append(result)
            print("  " + report.one_line(result), flush=True)
            write(document(args, raw_argv, plan, results), args.json)  # a long run keeps each
    final = document(args, raw_argv, plan, results)
    print(report.tables(final))
    write(final, args.json)
    return 0


def write(document: Obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + "\n")
    print(f"wrote {path}", flush=True)


def document(
    args: argparse.Namespace, raw_argv: list[str], plan: list[Setup], results: list[Obj]
) -> Obj:
    """The results file: the command, when and where it ran, the workload and every setup."""
    document: Obj = {
        "command": " ".join(["PYTHONPATH=. python benchmarks/operator_vs_upstream.py", *raw_argv]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "versions": {
            "trainop": trainop_revision(),
            "upstream": sorted({s.version for s in plan if s.operator == "upstream"}),
            "kubernetes": KUBERNETES_VERSION,
            "go": shutil.which("go")
            and subprocess.run(
                ["go", "env", "GOVERSION"], capture_output=True, text=True
            ).stdout.strip(),
        },
        "workload": {
            key: getattr(args, key)
            for key in (
                "jobs",
                "replicas",
                "rate",
                "run_seconds",
                "warmup",
                "rounds",
                "kubelet_workers",
                "saturate",
                "all_running",
                "ttl",
            )
        },
        "results": results,
        "medians": report.medians(results),
    }
    document["goals"] = report.goals(document["medians"])
    return document


if __name__ == "__main__":
    sys.exit(main())
