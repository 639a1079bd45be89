"""The moving parts of benchmarks/operator_vs_upstream.py: the workload, the processes, the clocks.

* :func:`job_manifest` — one job of a kind with its replicas split as a user would.
* :class:`Submitter` — creates jobs at a fixed rate (as the admin) and notes when each exists.
* :class:`JobWatch` — watches every job kind and notes when each job Succeeded (or Failed).
* :class:`Process` — a child process (operator, kubelet stand-in) with its CPU time and peak RSS.
* :func:`start_trainop` / :func:`start_upstream` / :func:`start_kubelet` — the children.

Every child runs in its own process, so its CPU seconds and memory are its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane, http_ok
from trainop_core.testing.rest import Rest, RestError

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
GROUP_PATH = "/apis/kubeflow.org/v1"


# --- the workload -------------------------------------------------------------------------------
def replica_counts(kind: str, replicas: int) -> dict[str, int]:
    """`replicas` pods per job, split over the kind's replica types as a user would."""
    if kind == "MXJob":
        return {"Scheduler": 1, "Server": 1, "Worker": max(1, replicas - 2)}
    if kind == "TFJob":
        return {"Worker": replicas}
    return {"Master": 1, "Worker": max(1, replicas - 1)}


def job_manifest(
    registry: KindRegistry, kind: str, name: str, replicas: int, ttl: int | None = None
) -> Obj:
    """A job of `replicas` busybox pods; `ttl` sets runPolicy.ttlSecondsAfterFinished, so the
    operator deletes the job that long after it finished (the garbage collector its pods)."""
    k = registry.get(kind)
    container = {"name": k.default_container, "image": "busybox", "command": ["true"]}
    specs = {
        rtype: {"replicas": n, "template": {"spec": {"containers": [dict(container)]}}}
        for rtype, n in replica_counts(kind, replicas).items()
    }
    spec: Obj = {k.replica_field: specs}
    if ttl is not None:
        spec["runPolicy"] = {"ttlSecondsAfterFinished": ttl}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": k.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


@dataclass
class Workload:
    registry: KindRegistry
    kinds: tuple[str, ...]
    replicas: int
    ttl: int | None = None  # runPolicy.ttlSecondsAfterFinished of every job (None: kept)

    def plural(self, kind: str) -> str:
        return self.registry.get(kind).plural

    def jobs(self, prefix: str, count: int) -> list[tuple[str, Obj]]:
        """(kind, manifest) of `count` jobs, the kinds taking turns."""
        out = []
        for i in range(count):
            kind = self.kinds[i % len(self.kinds)]
            name = f"{prefix}-{kind.lower()}-{i:05d}"
            out.append((kind, job_manifest(self.registry, kind, name, self.replicas, self.ttl)))
        return out

    def pods(self, count: int) -> int:
        kinds = [self.kinds[i % len(self.kinds)] for i in range(count)]
        return sum(sum(replica_counts(k, self.replicas).values()) for k in kinds)


class Submitter:
    """Creates `jobs` at `rate` a second (<= 0: as fast as it can) on its own thread."""

    def __init__(self, rest: Rest, workload: Workload, jobs: list[tuple[str, Obj]], rate: float):
        self.rest, self.workload, self.jobs, self.rate = rest, workload, jobs, rate
        self.created: dict[str, float] = {}  # job name -> monotonic time its create returned
        self.errors: list[str] = []
        self.seconds = 0.0  # from the first create sent to the last one answered
        self._thread = threading.Thread(target=self._run, name="submitter", daemon=True)

    def start(self) -> Submitter:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self._create_all(started)
        finally:
            self.seconds = time.monotonic() - started

    def _create_all(self, started: float) -> None:
        for i, (kind, manifest) in enumerate(self.jobs):
            if self.rate > 0:
                delay = started + i / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            path = f"{GROUP_PATH}/namespaces/{NAMESPACE}/{self.workload.plural(kind)}"
            try:
                self.rest.create(path, manifest)
            except RestError as err:
                self.errors.append(f"{manifest['metadata']['name']}: {err}")
                continue
            self.created[manifest["metadata"]["name"]] = time.monotonic()


class JobWatch:
    """One list+watch per job kind; notes the monotonic time each job is first seen Succeeded."""

    def __init__(self, rest: Rest, workload: Workload) -> None:
        self.rest, self.workload = rest, workload
        self.succeeded: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._closers: list[Any] = []
        self._threads = [
            threading.Thread(target=self._run, args=(p,), daemon=True) for p in self._paths()
        ]

    def _paths(self) -> list[str]:
        kinds = self.workload.kinds
        return [f"{GROUP_PATH}/namespaces/{NAMESPACE}/{self.workload.plural(k)}" for k in kinds]

    def start(self) -> JobWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for closer in list(self._closers):
            closer.close()

    def wait(self, names: set[str], timeout: float) -> bool:
        """Until every job in `names` Succeeded or Failed; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not names <= (self.succeeded.keys() | self.failed.keys()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 1.0))
        return True

    def _run(self, path: str) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    listed = self.rest.get(path)
                    for job in listed.get("items") or []:
                        self._see(job)
                    rv = listed["metadata"]["resourceVersion"]
                query = {"resourceVersion": rv, "allowWatchBookmarks": True, "timeoutSeconds": 600}
                closer, events = self.rest.stream(path, query, 660.0)
                self._closers.append(closer)
                for event in events:
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        rv = ""
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._see(obj)  # a job deleted as it finished (ttl 0) ends in DELETED
            except RestError:
                if not self._stop.is_set():
                    time.sleep(0.5)
                    rv = ""

    def _see(self, job: Obj) -> None:
        name = job["metadata"]["name"]
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("status") != "True" or cond.get("type") not in ("Succeeded", "Failed"):
                continue
            with self._changed:
                if cond["type"] == "Succeeded":
                    self.succeeded.setdefault(name, time.monotonic())
                else:
                    self.failed.setdefault(name, str(cond.get("message", "")))
                self._changed.notify_all()


class PodWatch(JobWatch):
    """One list+watch of the pods; notes the monotonic time each pod is first seen Running."""

    def __init__(self, rest: Rest, workload: Workload) -> None:
        self.running: dict[str, dict[str, float]] = {}  # job name -> pod name -> first Running
        super().__init__(rest, workload)

    def _paths(self) -> list[str]:
        return [f"/api/v1/namespaces/{NAMESPACE}/pods"]

    def all_running(self, job: str, pods: int) -> float | None:
        """When the last of the job's `pods` pods was first seen Running (None: not all were)."""
        with self._lock:
            seen = self.running.get(job, {})
            return max(seen.values()) if len(seen) >= pods else None

    def _see(self, pod: Obj) -> None:
        if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded"):
            return  # a pod seen Succeeded first ran between two events: its end is a bound
        meta = pod["metadata"]
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
        if owners:
            job = str(owners[0].get("name"))
            with self._lock:
                self.running.setdefault(job, {}).setdefault(meta["name"], time.monotonic())


# --- processes ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (its threads included), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS) and VmRSS of process `pid`, in kB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {"peak": int(fields["VmHWM"].split()[0]), "now": int(fields["VmRSS"].split()[0])}


@dataclass
class Process:
    """A child process; `metrics_port`/`probe_port` when it serves /metrics and /readyz."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    metrics_port: int = 0
    probe_port: int = 0
    cpu_mark: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=5)

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
        ) as answer:
            return str(answer.read().decode())

    def queue_depth(self) -> float | None:
        """The sum of workqueue_depth over its queues (None if /metrics did not answer)."""
        return self.metric_sum("workqueue_depth")

    def metric_sum(self, name: str, labels: str = "") -> float | None:
        """The sum of metric `name`'s samples whose labels contain `labels` (None if /metrics
        did not answer)."""
        try:
            text = self.metrics()
        except OSError:
            return None
        total = 0.0
        for line in text.splitlines():
            if line.startswith((name + "{", name + " ")) and labels in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def mark_cpu(self) -> None:
        self.cpu_mark = cpu_seconds(self.pid)

    def cpu_since_mark(self) -> float:
        return cpu_seconds(self.pid) - self.cpu_mark

    def stop(self, grace: float = 15.0) -> None:
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


#: util-linux's setpriv execs the child with a parent-death signal (the child keeps its pid, so
#: its CPU and RSS stay its own); missing on a machine without util-linux, where children may be
#: left behind by a killed driver.
SETPRIV = shutil.which("setpriv")


def _spawn(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Any:
    """Start child `name`; it gets SIGTERM when this driver dies, even by SIGKILL (a benchmark
    killed mid-run left its operator and kubelet stand-in running). The control plane has its
    own watchdog. The signal comes when the thread that started the child ends: start children
    from the main thread."""
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )


def python_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def start_trainop(
    name: str,
    kubeconfig: Path,
    kinds: tuple[str, ...],
    qps: int,
    burst: int,
    workdir: Path,
    flags: tuple[str, ...] = (),
    launcher: tuple[str, ...] = ("-m", "trainop_core.operator"),
) -> Process:
    """trainop's operator with the benchmark's settings; `flags` added last (they win);
    `launcher`: what `python` runs (benchmarks/traced_operator.py: the same under tracemalloc)."""
    metrics, probe, webhook = free_port(), free_port(), free_port()
    argv = [
        sys.executable, *launcher, f"--kubeconfig={kubeconfig}",
        # Plain HTTP on loopback, as upstream v1's metrics: no review requests in the counts.
        f"--metrics-bind-address=127.0.0.1:{metrics}", "--metrics-secure=false",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        # Its webhooks serve, with their own certificates, as upstream's do; no configuration
        # points at them (upstream's matches no object), so neither is ever called.
        f"--webhook-server-port={webhook}", "--webhook-host=127.0.0.1",
        "--webhook-namespace=default", f"--webhook-secret-name={name}-webhook-cert",
        f"--webhook-validating-configuration={name}-validator",  # never upstream's
        f"--webhook-mutating-configuration={name}-defaulter",
        f"--kube-api-qps={qps}", f"--kube-api-burst={burst}", "--log-level=INFO",
        *(f"--enable-scheme={k.lower()}" for k in kinds), *flags,
    ]  # fmt: skip
    log = workdir / f"{name}.log"
    return Process(name, _spawn(name, argv, log, python_env()), log, metrics, probe)


def start_upstream(
    name: str,
    binary: Path,
    kubeconfig: Path,
    kinds: tuple[str, ...],
    limits: tuple[int, int] | None,
    workdir: Path,
) -> Process:
    """Upstream's operator out of cluster; `limits` (qps, burst) only where it has the flags."""
    metrics, probe, webhook = free_port(), free_port(), free_port()
    argv = [
        str(binary), f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{probe}", f"--webhook-server-port={webhook}",
        "--zap-log-level=info", *(f"--enable-scheme={k.lower()}" for k in kinds),
    ]  # fmt: skip
    if limits is not None:
        argv += [f"--kube-api-qps={limits[0]}", f"--kube-api-burst={limits[1]}"]
    env = {k: v for k, v in os.environ.items() if k not in ("MY_POD_NAMESPACE",)}
    env["KUBECONFIG"] = str(kubeconfig)
    log = workdir / f"{name}.log"
    return Process(name, _spawn(name, argv, log, env), log, metrics, probe)


def start_kubelet(
    cp: ControlPlane, run_seconds: float, workers: int, workdir: Path, log_text: str = ""
) -> Process:
    """The kubelet stand-in in its own process (benchmarks/kubelet_process.py); every container
    prints `log_text` when it starts."""
    argv = [
        sys.executable, str(Path(__file__).with_name("kubelet_process.py")),
        f"--kubeconfig={cp.kubeconfig}", f"--namespace={NAMESPACE}",
        f"--run-seconds={run_seconds}", f"--workers={workers}", f"--log={log_text}",
    ]  # fmt: skip
    log = workdir / "kubelet.log"
    process = Process("kubelet", _spawn("kubelet", argv, log, python_env()), log)
    deadline = time.monotonic() + 60
    while "ready" not in log.read_text(errors="replace"):
        if not process.alive() or time.monotonic() > deadline:
            raise SystemExit(f"kubelet stand-in did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return process


def wait_ready(process: Process, timeout: float = 180.0, while_waiting: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not process.ready():
        if while_waiting is not None:
            while_waiting()
        if not process.alive() or time.monotonic() > deadline:
            with contextlib.suppress(OSError):
                tail = process.log.read_text(errors="replace")[-4000:]
            raise SystemExit(f"{process.name} did not become ready:\n{tail}")
        time.sleep(0.2)
