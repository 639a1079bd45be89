"""What per-pod networking costs: sandbox set-up, wrap overhead, DNS queries, TCP throughput.

    sudo PYTHONPATH=. python benchmarks/pod_network.py [--sandboxes 20] [--mib 256] [--json F]

Starts a real control plane (no controller manager) and a ClusterNetwork, then prints one line
per figure: median milliseconds to make a sandbox and to run `true` wrapped minus unwrapped,
median microseconds per DNS query asked from inside a pod (UDP round trip, sequential, Python
client), and MiB/s of one TCP stream pod to pod, through a ClusterIP Service (the userspace
proxy), and over the host's loopback for comparison, with the 1-minute load average. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainop_core.node.network import ClusterNetwork, Sandbox
from trainop_core.testing.builders import wait_for
from trainop_core.testing.controlplane import ControlPlane

SINK = textwrap.dedent("""
    import socket, sys
    server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        buffer, total = bytearray(1 << 20), 0
        while n := conn.recv_into(buffer):
            total += n
        conn.sendall(str(total).encode())
        conn.close()
""")
SOURCE = textwrap.dedent("""
    import socket, sys, time
    host, port, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chunk = b"x" * (1 << 20)
    conn = socket.create_connection((host, port), timeout=30)
    started = time.perf_counter()
    for _ in range(mib):
        conn.sendall(chunk)
    conn.shutdown(socket.SHUT_WR)
    assert int(conn.recv(64)) == mib << 20
    print(f"{mib / (time.perf_counter() - started):.0f}")
""")
QUERIES = textwrap.dedent("""
    import socket, struct, sys, time
    name, server, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((server, 53))
    samples = []
    for i in range(count):
        started = time.perf_counter()
        s.send(struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0) + labels + b"\\0\\0\\1\\0\\1")
        reply = s.recv(512)
        samples.append(time.perf_counter() - started)
        assert struct.unpack_from("!HHHH", reply)[0::3] == (i, 1), "no answer"
    samples.sort()
    print(f"{samples[count // 2] * 1e6:.0f}")
""")


def median_ms(action: Callable[[], object], times: int) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def in_pod(sandbox: Sandbox | None, code: str, *args: str) -> str:
    argv = [sys.executable, "-c", code, *args]
    done = subprocess.run(sandbox.wrap(argv) if sandbox else argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return done.stdout.strip()


def serve(sandbox: Sandbox | None, port: int) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", SINK, str(port)]
    process = subprocess.Popen(
        sandbox.wrap(argv) if sandbox else argv, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def measure(cp: ControlPlane, network: ClusterNetwork, args: argparse.Namespace) -> dict[str, Any]:
    made = iter(range(10**6))
    setup = median_ms(lambda: network.sandbox("bench", "p", f"uid-{next(made)}"), args.sandboxes)
    print(f"sandbox setup: {setup:.1f} ms (median of {args.sandboxes})")
    a = network.sandbox("bench", "a", "uid-a", hostname="a", subdomain="peers")
    b = network.sandbox("bench", "b", "uid-b")
    wrapped = median_ms(lambda: subprocess.run(a.wrap(["true"]), check=True), 30)
    bare = median_ms(lambda: subprocess.run(["true"], check=True), 30)
    print(f"wrap overhead: {wrapped - bare:.1f} ms (true: {wrapped:.1f} wrapped, {bare:.1f} bare)")
    make_services(cp, a.ip)
    wait_for(lambda: _resolves(b), timeout=60, interval=0.2)
    micros = int(in_pod(b, QUERIES, "sink.bench.svc.cluster.local", network.dns_ip, "2000"))
    print(f"DNS query: {micros} µs median (UDP round trip from a pod, sequential, 2000 queries)")
    sinks = [serve(a, 9000), serve(None, 9001)]
    try:
        pod = int(in_pod(b, SOURCE, "a.peers", "9000", str(args.mib)))
        service = int(in_pod(b, SOURCE, "sink", "80", str(args.mib)))
        host = int(in_pod(None, SOURCE, "127.0.0.1", "9001", str(args.mib)))
    finally:
        for sink in sinks:
            sink.kill()
    load = os.getloadavg()[0]
    print(f"pod-to-pod TCP: {pod} MiB/s; through a ClusterIP Service: {service} MiB/s;")
    print(f"host loopback (for comparison): {host} MiB/s  (one stream, {args.mib} MiB)")
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    return {
        "sandbox_setup_ms": round(setup, 1), "wrap_overhead_ms": round(wrapped - bare, 1),
        "dns_query_us_median": micros, "pod_to_pod_mib_s": pod, "cluster_ip_mib_s": service,
        "host_loopback_mib_s": host, "load_1min_at_end": round(load, 2), "cpus": os.cpu_count(),
    }  # fmt: skip


def make_services(cp: ControlPlane, ip: str) -> None:
    cp.ensure_namespace("bench")
    port = {"name": "p", "port": 80, "targetPort": 9000}
    cp.rest.create("/api/v1/namespaces/bench/services",
                   {"metadata": {"name": "sink"}, "spec": {"ports": [port]}})  # fmt: skip
    cp.rest.create("/api/v1/namespaces/bench/services",
                   {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None"}})  # fmt: skip
    endpoints = [{"addresses": [ip], "hostname": "a", "conditions": {"ready": True}}]
    for service in ("sink", "peers"):
        cp.rest.create("/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices", {
            "metadata": {"name": service, "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "endpoints": endpoints,
            "ports": [{"name": "p" if service == "sink" else "", "port": 9000}],
        })  # fmt: skip


def _resolves(b: Sandbox) -> bool:
    done = subprocess.run(b.wrap(["getent", "hosts", "sink"]), capture_output=True)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=20, help="sandboxes timed")
    parser.add_argument("--mib", type=int, default=256, help="MiB per TCP stream")
    parser.add_argument("--json", type=Path, help="also write the figures here, with the command")
    args = parser.parse_args(argv)
    with ControlPlane(controller_manager=False) as cp:
        started = time.perf_counter()
        with ClusterNetwork(cp.rest.connection) as network:
            start_ms = round((time.perf_counter() - started) * 1000)
            print(f"network start: {start_ms} ms")
            figures = {"network_start_ms": start_ms, **measure(cp, network, args)}
    if args.json:
        command = "PYTHONPATH=. python benchmarks/pod_network.py " + " ".join(argv or sys.argv[1:])
        args.json.write_text(json.dumps({"command": command.strip(), **figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
