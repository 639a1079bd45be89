"""What the operator's HTTP layer costs against httpx and the official client, on a real
kube-apiserver: the figures behind keeping `trainop_core/operator/connection.py`.

    PYTHONPATH=. python benchmarks/http_layers.py [--requests 1000] [--runs 5]

Issue 24 asks whether a maintained client (httpx, with HTTP/2 through h2; lightkube and kr8s are
Kubernetes clients on httpx) should replace the home-made one. This prints, per layer:

* import: the median wall time of `--runs` fresh interpreters importing it, and the resident
  memory it adds (VmRSS after the import, less before it). `Connection` itself needs only
  http.client and ssl; importing its module also imports the `trainop_core` package (its job
  models), which the operator loads anyway;
* CPU per request: the process CPU time (user + system) of `--requests` GETs of one small object
  on one kept-alive connection, as the operator sends most of its requests (single pods, leases,
  status writes' answers are of that size), and of a 100-item list, divided by the count; the
  layers take turns over `--rounds` rounds and the median round is printed (the machine may be
  shared).

Layers: the operator's `Connection` (http.client), `httpx.Client` over HTTP/1.1, `httpx.Client`
with ``http2=True`` (only when h2 is installed), and `kubernetes.client.ApiClient.call_api`
(answers not deserialised). lightkube and kr8s are measured only when installed; both sit on
httpx, so its figures are their floor.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trainop_core.testing.controlplane import ControlPlane

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "bench-http"

IMPORTS = {
    "http.client + ssl (Connection's needs)": "import http.client, ssl",
    "trainop_core.operator.connection": "import trainop_core.operator.connection",
    "httpx": "import httpx",
    "httpx + h2 (HTTP/2)": "import httpx, h2.connection",
    "kubernetes.client": "import kubernetes.client",
    "lightkube": "import lightkube",
    "kr8s": "import kr8s",
}
_MEASURE = """
import sys, time
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
before = rss(); started = time.perf_counter()
{code}
print(time.perf_counter() - started, rss() - before)
"""


def import_cost(code: str, runs: int) -> tuple[float, float]:
    """(median seconds, median bytes of RSS) that `code` adds to a fresh interpreter."""
    seconds, memory = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _MEASURE.format(code=code)],
            capture_output=True, text=True, check=True, cwd=REPO,
        )  # fmt: skip
        wall, rss = out.stdout.split()
        seconds.append(float(wall))
        memory.append(float(rss))
    return statistics.median(seconds), statistics.median(memory)


def cpu_per_call(call: Callable[[], object], count: int) -> float:
    """Process CPU seconds per call, after a warm-up call (connection set up)."""
    call()
    started = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - started) / count


def clients(cp: ControlPlane) -> dict[str, Callable[[str], Callable[[], object]]]:
    """Each layer's GET of a path, as a zero-argument call on a kept-alive connection."""
    from trainop_core.operator.connection import Connection, tls_context

    layers: dict[str, Callable[[str], Callable[[], object]]] = {}
    bearer = f"Bearer {cp.admin_token}"
    own = Connection(cp.url, tls_context(ca_file=str(cp.ca_file)), lambda: bearer)
    accept = {"Accept": "application/json"}

    def own_get(path: str) -> Callable[[], object]:
        return lambda: json.loads(own.request("GET", path, None, accept, (10, 30))[2])

    layers["trainop Connection (http.client)"] = own_get
    import httpx

    for name, http2 in (("httpx HTTP/1.1", False), ("httpx HTTP/2", True)):
        if http2 and importlib.util.find_spec("h2") is None:
            continue
        client = httpx.Client(
            base_url=cp.url, verify=str(cp.ca_file), http2=http2,
            headers={"Authorization": bearer, **accept},
        )  # fmt: skip
        layers[name] = lambda path, c=client: lambda: c.get(path).json()  # type: ignore[misc]
    api = cp.api_client()

    def official(path: str) -> Callable[[], object]:
        def call() -> object:
            resp = api.call_api(path, "GET", header_params=accept, auth_settings=["BearerToken"],
                                _preload_content=False)  # fmt: skip
            return json.loads(resp[0].data)

        return call

    layers["kubernetes ApiClient.call_api"] = official
    return layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="GETs timed per layer")
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per import")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the CPU per request")
    args = parser.parse_args()
    print("import (fresh interpreter, median of runs):")
    for name, code in IMPORTS.items():
        module = code.split()[-1].split(".")[0]
        if importlib.util.find_spec(module) is None:
            print(f"  {name:36} not installed")
            continue
        seconds, rss = import_cost(code, args.runs)
        print(f"  {name:36} {seconds * 1000:7.1f} ms  {rss / 2**20:6.1f} MiB")
    with ControlPlane(controller_manager=False) as cp:
        cp.ensure_namespace(NAMESPACE)
        for i in range(100):
            cp.rest.create(f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                           {"metadata": {"name": f"c{i}"}, "data": {"k": "v" * 200}})  # fmt: skip
        one = f"/api/v1/namespaces/{NAMESPACE}/configmaps/c0"
        many = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        print(f"CPU per request ({args.requests} GETs, one kept-alive connection, TLS):")
        print(f"  {'layer':36} {'one object':>12} {'100-item list':>14}")
        layers = clients(cp)
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in layers}
        for _ in range(args.rounds):
            for name, get in layers.items():
                small = cpu_per_call(get(one), args.requests)
                large = cpu_per_call(get(many), max(1, args.requests // 4))
                figures[name].append((small, large))
        for name, rounds in figures.items():
            small = statistics.median(r[0] for r in rounds)
            large = statistics.median(r[1] for r in rounds)
            print(f"  {name:36} {small * 1e6:9.0f} us {large * 1e6:11.0f} us")
    if importlib.util.find_spec("h2") is None:
        print("httpx HTTP/2 not measured: h2 is not installed (httpx[http2])")


if __name__ == "__main__":
    main()
