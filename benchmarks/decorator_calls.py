"""How many requests a decorator server gets per job from the operator, on the real control plane.

    PYTHONPATH=.:tests python benchmarks/decorator_calls.py [--jobs 20]

A real etcd + kube-apiserver, the kubelet stand-in (pods run until they are told to exit), the
operator in this process configured with the example site policy (examples/decorators) as its
decorator server, and jobs of every kind (1 to 3 replica types each). Phases, each counted from the
server's own request log:

1. create every job and wait for all its pods          -> expected: one call per replica type
2. leave the running jobs alone for --steady seconds    -> expected: none
3. fail one worker of every job with a retryable code; the operator re-creates it (same
   generation)                                          -> expected: none (the answer is cached)
4. add a worker to every job (a new generation)         -> expected: one call per job (workers)
5. restart the operator (its cache is lost), then fail a worker of every job again
                                                        -> expected: one call per job (workers)

Prints a table of calls, calls per job and per (job, replica type created), the server-side
latency, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decorator_servers import config_file, policy_server

from trainop_core.crds import all_crds
from trainop_core.decorators import load_decorator_config
from trainop_core.kinds.table import build_registry
from trainop_core.operator.manager import Manager
from trainop_core.operator.options import Options
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.kubelet import Kubelet, Rule

NAMESPACE = "bench"
EXIT = {"restartPolicy": "ExitCode"}
# kind -> (replica field, container, {replica type: count}); workers restart on a retryable exit
JOBS: dict[str, tuple[str, str, dict[str, int]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch", {"Master": 1, "Worker": 3}),
    "TFJob": ("tfReplicaSpecs", "tensorflow", {"Chief": 1, "PS": 1, "Worker": 2}),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost", {"Master": 1, "Worker": 2}),
    "MXJob": ("mxReplicaSpecs", "mxnet", {"Scheduler": 1, "Server": 1, "Worker": 2}),
    "JAXJob": ("jaxReplicaSpecs", "jax", {"Worker": 4}),
}


def job(kind: str, name: str) -> dict[str, Any]:
    field, container, replicas = JOBS[kind]
    template = {"spec": {"containers": [{"name": container, "image": "python:3.11-slim"}]}}
    specs = {
        rtype: {"replicas": n, "template": template, **(EXIT if rtype == "Worker" else {})}
        for rtype, n in replicas.items()
    }
    return {"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {field: specs}}  # fmt: skip


def until(check: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


class Bench:
    def __init__(self, cp: ControlPlane, kubelet: Kubelet, config: Path, jobs: int) -> None:
        self.cp, self.kubelet, self.config = cp, kubelet, config
        self.names = [(kind, f"{kind.lower()}-{i}") for i in range(jobs) for kind in JOBS][:jobs]
        self.manager: Manager | None = None
        self.thread: threading.Thread | None = None
        self.latency_sum, self.latency_count = 0.0, 0  # seconds per call, operator side

    def start_operator(self) -> None:
        options = Options(
            namespace=NAMESPACE,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            kube_api_qps=-1,
            webhook=WebhookOptions(port=0),
        )
        self.manager = Manager(options, build_registry(), self.cp.api_client(),
                               load_decorator_config(self.config))  # fmt: skip
        self.thread = threading.Thread(target=self.manager.run, daemon=True)
        self.thread.start()

    def stop_operator(self) -> None:
        assert self.manager is not None and self.thread is not None
        for line in self.manager.metrics.registry.render().splitlines():
            if line.startswith("trainop_decorator_request_duration_seconds_sum"):
                self.latency_sum += float(line.rsplit(" ", 1)[1])
            elif line.startswith("trainop_decorator_request_duration_seconds_count"):
                self.latency_count += int(line.rsplit(" ", 1)[1])
        self.manager.shutdown()
        self.thread.join(15)

    def pods(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.cp.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods")[
            "items"
        ]
        return found

    def running(self, count: int) -> bool:
        live = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        return sum(p.get("status", {}).get("phase") == "Running" for p in live) >= count

    def expected_pods(self, extra_workers: int = 0) -> int:
        return sum(sum(JOBS[k][2].values()) + extra_workers for k, _ in self.names)

    def fail_one_worker_each(self) -> None:
        uids = {p["metadata"]["uid"] for p in self.pods()}
        for _, name in self.names:
            self.kubelet.terminate(NAMESPACE, f"{name}-worker-0", exit_code=137)
        until(lambda: len({p["metadata"]["uid"] for p in self.pods()} - uids) >= len(self.names),
              "workers re-created")  # fmt: skip

    def add_worker_each(self) -> None:
        for kind, name in self.names:
            plural = build_registry().get(kind).plural
            field, _, replicas = JOBS[kind]
            path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{plural}/{name}"
            patch = {"spec": {field: {"Worker": {"replicas": replicas["Worker"] + 1}}}}
            self.cp.rest.patch(path, patch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs, kinds taking turns")
    parser.add_argument("--steady", type=float, default=15.0, help="seconds left alone")
    args = parser.parse_args(argv)
    registry = build_registry()
    rows: list[tuple[str, int, float, float]] = []
    with (
        ControlPlane(crds=all_crds(registry.kinds)) as cp,
        policy_server() as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        cp.ensure_namespace(NAMESPACE)
        config = config_file(Path(tmp), server, timeoutSeconds=10)
        with Kubelet(cp, [Rule("*", run_seconds=None)], namespace=NAMESPACE) as kubelet:
            bench = Bench(cp, kubelet, config, args.jobs)
            types = sum(len(JOBS[k][2]) for k, _ in bench.names)

            def phase(label: str, work: Callable[[], None], per: int) -> None:
                before = server.calls
                work()
                calls = server.calls - before
                rows.append((label, calls, calls / len(bench.names), calls / per if per else 0))

            bench.start_operator()

            def create() -> None:
                for kind, name in bench.names:
                    plural = registry.get(kind).plural
                    cp.rest.create(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{plural}",
                                   job(kind, name))  # fmt: skip
                until(lambda: bench.running(bench.expected_pods()), "every pod running")

            phase("1 create (first generation)", create, types)
            phase(f"2 steady {args.steady:g} s", lambda: time.sleep(args.steady), types)
            phase("3 a worker re-created", bench.fail_one_worker_each, len(bench.names))

            def scale() -> None:
                bench.add_worker_each()
                until(lambda: bench.running(bench.expected_pods(1)), "added workers running")

            phase("4 a worker added (new generation)", scale, len(bench.names))

            def restart() -> None:
                bench.stop_operator()
                bench.start_operator()
                bench.fail_one_worker_each()

            phase("5 operator restarted, a worker re-created", restart, len(bench.names))
            bench.stop_operator()
    print(f"{len(bench.names)} jobs ({', '.join(JOBS)}), {types} replica types in all; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'phase':44} {'calls':>6} {'per job':>8} {'per unit':>9}")
    for label, calls, per_job, per_unit in rows:
        print(f"{label:44} {calls:6d} {per_job:8.2f} {per_unit:9.2f}")
    print("(unit: a replica type of a job in phase 1, a job afterwards)")
    mean = bench.latency_sum / max(bench.latency_count, 1) * 1000
    print(f"{bench.latency_count} calls took {mean:.1f} ms on average, seen by the operator "
          "(connect, request, answer, over loopback HTTP)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
