"""Throughput of the fake API server (a script that prints figures; not a test).

    python benchmarks/apiserver.py [--pods 5000] [--watchers 1,10,50] [--events 2000]

Measures create/get/list of pods over raw HTTP (``http.client``, one keep-alive connection)
and through the official client with ``_preload_content=False``, then watch fan-out: N raw
watch streams each receiving M events, reported as events delivered per second.
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainop_core.testing import ApiServer, Kubelet, Rule  # needs the sys.path line above

POD_PATH = "/api/v1/namespaces/default/pods"


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"job": "bench", "index": name.rsplit("-", 1)[-1]}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
    }


class Raw:
    """One keep-alive HTTP connection speaking JSON."""

    def __init__(self, url: str) -> None:
        address = urlsplit(url)
        self.conn = http.client.HTTPConnection(address.hostname, address.port)

    def call(self, method: str, path: str, body: Any = None) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        payload = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return payload


def timed(count: int, action: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for i in range(count):
        action(i)
    return time.perf_counter() - start


def bench_raw(srv: ApiServer, pods: int) -> list[tuple[str, int, float]]:
    raw = Raw(srv.url)

    def create(i: int) -> object:
        return raw.call("POST", POD_PATH, pod(f"raw-{i}"))

    def by_label(i: int) -> object:
        return raw.call("GET", f"{POD_PATH}?labelSelector=index%3D{i}")

    def list_all(_: int) -> object:
        return json.loads(raw.call("GET", POD_PATH))

    lists = 10
    return [
        ("create pod (raw http)", pods, timed(pods, create)),
        ("get pod (raw http)", pods, timed(pods, lambda i: raw.call("GET", f"{POD_PATH}/raw-{i}"))),
        (f"list {pods} pods (raw http)", lists, timed(lists, list_all)),
        (f"list {pods} pods, 500/page (raw)", lists, timed(lists, lambda _: list_paged(raw))),
        ("list by label, 1 match (raw)", 200, timed(200, by_label)),
    ]


def list_paged(raw: Raw) -> int:
    token, total = "", 0
    while True:
        page = json.loads(raw.call("GET", f"{POD_PATH}?limit=500&continue={token}"))
        total += len(page["items"])
        token = page["metadata"].get("continue", "")
        if not token:
            return total


def bench_client(srv: ApiServer, pods: int) -> list[tuple[str, int, float]]:
    client = importlib.import_module("kubernetes.client")
    api = client.CoreV1Api(srv.api_client())
    n, total = min(pods, 2000), pods + min(pods, 2000)

    def create(i: int) -> object:
        return api.create_namespaced_pod("default", pod(f"cl-{i}"), _preload_content=False).read()

    def get(i: int) -> object:
        return api.read_namespaced_pod(f"cl-{i}", "default", _preload_content=False).read()

    def list_raw(_: int) -> object:
        return json.loads(api.list_namespaced_pod("default", _preload_content=False).read())

    return [
        ("create pod (client, raw resp)", n, timed(n, create)),
        ("get pod (client, raw resp)", n, timed(n, get)),
        (f"list {total} pods (client, raw)", 5, timed(5, list_raw)),
        (
            f"list {total} pods (client, models)",
            1,
            timed(1, lambda _: api.list_namespaced_pod("default")),
        ),
    ]


def bench_watch(srv: ApiServer, watchers: int, events: int) -> tuple[str, int, float]:
    store = srv.store
    rt = store.resource("configmaps")
    rv = str(store.resource_version)
    received = [0] * watchers
    ready = threading.Barrier(watchers + 1)
    address = urlsplit(srv.url)

    def watch(slot: int) -> None:
        conn = http.client.HTTPConnection(address.hostname, address.port)
        conn.request("GET", f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")
        response = conn.getresponse()
        ready.wait()
        while received[slot] < events:
            if not response.readline():
                break
            received[slot] += 1
        conn.close()

    threads = [threading.Thread(target=watch, args=(i,), daemon=True) for i in range(watchers)]
    for thread in threads:
        thread.start()
    ready.wait()
    while srv.stats.open_watches < watchers:
        time.sleep(0.001)
    start = time.perf_counter()
    for i in range(events):
        store.create(rt, "default", {"metadata": {"name": f"w{watchers}-{i}"}})
    for thread in threads:
        thread.join(120)
    elapsed = time.perf_counter() - start
    assert sum(received) == watchers * events, received
    store_ns = [o["metadata"]["name"] for o in store.list(rt, "default").items]
    for name in store_ns:
        store.delete(rt, "default", name)
    return (f"watch fan-out {watchers}x{events}", watchers * events, elapsed)


def bench_kubelet(pods: int) -> tuple[str, int, float]:
    """Pods created in-process, driven Pending -> Running -> Succeeded by the kubelet."""
    with ApiServer() as srv, Kubelet(srv, [Rule("*", run_seconds=0.0)]):
        rt = srv.store.resource("pods")
        start = time.perf_counter()
        for i in range(pods):
            srv.store.create(rt, "default", pod(f"k-{i}"))
        done = 0
        while done < pods:
            items = srv.store.list(rt, "default").items
            done = sum(1 for p in items if p.get("status", {}).get("phase") == "Succeeded")
            time.sleep(0.05)
        return (f"kubelet: {pods} pods to Succeeded", pods, time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--watchers", default="1,10,50")
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    rows: list[tuple[str, int, float]] = []
    with ApiServer() as srv:
        rows += bench_raw(srv, args.pods)
        try:
            rows += bench_client(srv, args.pods)
        except ImportError:
            print("kubernetes client not installed: skipping client figures")
        for watchers in (int(w) for w in args.watchers.split(",")):
            rows.append(bench_watch(srv, watchers, args.events))
        by_verb = srv.stats.by_verb()
    rows.append(bench_kubelet(args.pods))
    print(f"{'operation':<38} {'count':>8} {'seconds':>9} {'per second':>11} {'ms/op':>8}")
    for name, count, seconds in rows:
        rate, ms = count / seconds, seconds / count * 1000
        print(f"{name:<38} {count:>8} {seconds:>9.3f} {rate:>11,.0f} {ms:>8.3f}")
    print("API requests by verb:", dict(sorted(by_verb.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
