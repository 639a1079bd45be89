"""What the process node's kubelet endpoint costs, seen through kubectl and the real kube-apiserver.

    PYTHONPATH=. python benchmarks/kubelet_server.py [--runs 15] [--log-mb 50] [--stdin-mb 20]

Starts a control plane (cached binaries) whose kube-apiserver holds the kubelet client
certificate, a node endpoint (trainop_core.node.server) over a runtime that runs commands here,
and one pod bound to that node; then prints:

- exec round trip: the median and p90 wall time of ``kubectl exec POD -- true`` (kubectl's own
  start included, as a user sees it), and of ``kubectl get pod POD`` for comparison;
- logs: ``kubectl logs`` of a CRI log file of `--log-mb` MB of 100-byte lines, MB/s;
- exec stdin: `--stdin-mb` MB through ``kubectl exec -i POD -- cat`` and back, MB/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from trainop_core.node.crilog import CriLogWriter
from trainop_core.node.pki import KubeletPki
from trainop_core.node.remotecommand import ExecCommand
from trainop_core.node.server import serve_in_thread
from trainop_core.testing.controlplane import ControlPlane

NODE, NS, POD, CONTAINER = "bench-node", "default", "bench", "main"


class OneContainer:
    """A ContainerRuntime with one running container whose log is one file."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> list[Path] | None:
        return None if previous else [self.log]

    def running(self, namespace: str, pod: str, container: str) -> bool:
        return True

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        return ExecCommand(command)


def kubectl(cp: ControlPlane, *args: str, stdin: bytes | None = None) -> tuple[float, bytes]:
    env = dict(os.environ, KUBECONFIG=str(cp.kubeconfig))
    started = time.perf_counter()
    done = subprocess.run(
        ["kubectl", "-n", NS, *args], env=env, input=stdin, capture_output=True, check=True
    )
    return time.perf_counter() - started, done.stdout


def register(cp: ControlPlane, port: int) -> None:
    cp.rest.create("/api/v1/nodes", {"metadata": {"name": NODE}})
    status = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
    }
    cp.rest.patch(f"/api/v1/nodes/{NODE}/status", {"status": status})
    spec = {"nodeName": NODE, "containers": [{"name": CONTAINER, "image": "none"}]}
    cp.rest.create(f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": POD}, "spec": spec})
    cp.rest.patch(f"/api/v1/namespaces/{NS}/pods/{POD}/status", {"status": {"phase": "Running"}})


def write_log(path: Path, megabytes: int) -> int:
    line = b"x" * 99 + b"\n"
    with CriLogWriter(path) as writer:
        for _ in range(megabytes * 10_000 // 1000):
            writer.write("stdout", line * 1000)
    return megabytes * 1_000_000


def report(name: str, seconds: list[float]) -> None:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    median = statistics.median(ordered) * 1000
    print(f"{name}: median {median:.0f} ms, p90 {p90 * 1000:.0f} ms ({len(ordered)} runs)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="exec and get round trips")
    parser.add_argument("--log-mb", type=int, default=50, help="MB of log kubectl logs reads")
    parser.add_argument("--stdin-mb", type=int, default=20, help="MB sent through exec -i")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        pki = KubeletPki.create(Path(tmp, "pki"))
        log = Path(tmp, "main.log")
        size = write_log(log, args.log_mb)
        context = pki.server_context(*pki.node_serving(NODE, ["127.0.0.1"]))
        server = serve_in_thread(OneContainer(log), context)
        try:
            with ControlPlane(controller_manager=False, kubelet_pki=pki) as cp:
                register(cp, server.port)
                measure(cp, args, size)
        finally:
            server.stop()
    return 0


def measure(cp: ControlPlane, args: argparse.Namespace, log_size: int) -> None:
    kubectl(cp, "exec", POD, "--", "true")  # warm: discovery cache, connections
    report("kubectl get pod", [kubectl(cp, "get", "pod", POD)[0] for _ in range(args.runs)])
    report(
        "kubectl exec -- true",
        [kubectl(cp, "exec", POD, "--", "true")[0] for _ in range(args.runs)],
    )
    seconds, out = kubectl(cp, "logs", POD)
    assert len(out) == log_size, (len(out), log_size)
    rate = log_size / 1e6 / seconds
    print(f"kubectl logs: {log_size / 1e6:.0f} MB in {seconds:.2f} s, {rate:.1f} MB/s")
    data = os.urandom(args.stdin_mb * 1_000_000)
    seconds, out = kubectl(cp, "exec", "-i", POD, "--", "cat", stdin=data)
    assert out == data, "cat gave back something else"
    rate = len(data) / 1e6 / seconds
    size = len(data) / 1e6
    print(f"kubectl exec -i cat: {size:.0f} MB each way in {seconds:.2f} s, {rate:.1f} MB/s")


if __name__ == "__main__":
    raise SystemExit(main())
