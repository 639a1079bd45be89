"""`trainop ui`: the server's memory while a page follows a 1 GiB log, and time to first byte.

    python benchmarks/ui.py [--gib 1] [--requests 50] [--out benchmarks/results/ui.json]

Starts `trainop ui` (a subprocess on a free loopback port, over a temporary TRAINOP_HOME) and a
local job whose one replica writes `--gib` GiB of 1 KiB lines as fast as it can, then waits.
Measures, sampling the server's RSS every 0.1 s (psutil):
  1. follow: the log view's stream (`/logs`, the last 500 lines then everything new) read as
     fast as this client can, until it has received the whole log: peak RSS over the baseline;
  2. tail: once the log is complete, a new log view's time to its first lines (it starts at the
     last 500 lines: what came before is never read);
  3. metrics: the metric curves' stream, which reads the whole log from its start;
  4. time to first byte of the page (`/`) and of the job list (`/api/jobs`), `--requests` each;
  5. stalled: a second job writing `--gib` GiB; a client opens its log view, reads the first
     event, then stops reading (its connection stays open) until the whole log is written:
     peak RSS over the baseline (the pump's queue fills and its thread waits).
Goals: the server's peak stays within 64 MiB of its baseline whatever the log's size, whether
the client reads fast or not at all; the tail starts in well under a second; the page's first
byte in a few milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
URL_LINE = re.compile(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)")
LINE_BYTES = 1024
WRITER = (
    "import sys, time\n"
    "lines = int(sys.argv[1])\n"
    "out = sys.stdout.buffer\n"
    "for i in range(lines):\n"
    f"    out.write(b'%012d loss=%.6f ' % (i, 1 / (i + 1)) + b'x' * {LINE_BYTES - 28} + b'\\n')\n"
    "out.flush()\n"
    "print('written', flush=True)\n"
    "time.sleep(900)\n"
)


class RssSampler:
    """The peak RSS of a process, sampled every 0.1 s in a thread while running."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> RssSampler:
        self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Ui:
    def __init__(self, home: Path) -> None:
        env = {**os.environ, "TRAINOP_HOME": str(home), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "trainop_core.cli.main", "ui", "--address"]
        self.process = subprocess.Popen(
            [*command, "127.0.0.1:0", "--studies", str(home / "studies")],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        match = URL_LINE.search(line)
        if match is None:
            raise SystemExit(f"trainop ui printed no URL: {line!r}")
        self.port, self.token = int(match.group(1)), match.group(2)

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)

    def get(self, path: str) -> http.client.HTTPResponse:
        connection = self.connection()
        cookie = f"trainop-ui-{self.port}={self.token}"
        connection.request("GET", path, headers={"Cookie": cookie})
        return connection.getresponse()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def events(response: http.client.HTTPResponse) -> Any:
    """(event name, data bytes) of a server-sent event stream, as they arrive."""
    name, data = b"", b""
    while line := response.readline():
        if line == b"\n":
            yield name.decode(), data
            name, data = b"", b""
        elif line.startswith(b"event: "):
            name = line[7:].strip()
        elif line.startswith(b"data: "):
            data = line[6:].rstrip(b"\n")


def follow(ui: Ui, path: str, until: int, event: str, last: bytes = b"") -> dict[str, float]:
    """Read `path`'s events until `until` items of `event` came (or one holding `last`); the
    time it took and the server's peak RSS."""
    baseline = psutil.Process(ui.process.pid).memory_info().rss
    items = 0
    start = time.monotonic()
    with RssSampler(ui.process.pid) as rss:
        for name, data in events(ui.get(path)):
            if name == event:
                items += len(json.loads(data))
            if items >= until or (last and last in data) or name in ("end", "failed"):
                break
    seconds = time.monotonic() - start
    return {
        "items": items,
        "seconds": round(seconds, 2),
        "baseline_rss_mib": round(baseline / 2**20, 1),
        "peak_rss_mib": round(rss.peak / 2**20, 1),
        "growth_mib": round((rss.peak - baseline) / 2**20, 1),
    }


def first_lines(ui: Ui, path: str) -> float:
    start = time.monotonic()
    for name, _ in events(ui.get(path)):
        if name == "lines":
            return round(time.monotonic() - start, 3)
    raise SystemExit("the log stream ended without lines")


def ttfb(ui: Ui, path: str, requests: int) -> dict[str, float]:
    times = []
    for _ in range(requests):
        start = time.monotonic()
        response = ui.get(path)
        response.read(1)
        times.append(time.monotonic() - start)
        response.read()
    times.sort()
    return {
        "median_ms": round(statistics.median(times) * 1000, 2),
        "p95_ms": round(times[int(len(times) * 0.95) - 1] * 1000, 2),
        "requests": requests,
    }


def stalled(ui: Ui, client: Any, name: str) -> dict[str, float]:
    """Open `name`'s log view, read its first event, then read nothing more until the job's
    writer says "written"; the server's peak RSS meanwhile."""
    baseline = psutil.Process(ui.process.pid).memory_info().rss
    start = time.monotonic()
    with RssSampler(ui.process.pid) as rss:
        response = ui.get(f"/api/jobs/default/{name}/logs")
        next(events(response))  # the first event; from here on this client reads nothing
        while not any(line.text == "written" for line in client.logs(name, tail=1)):
            time.sleep(0.5)
        seconds = time.monotonic() - start
        response.close()
    return {
        "seconds": round(seconds, 2),
        "baseline_rss_mib": round(baseline / 2**20, 1),
        "peak_rss_mib": round(rss.peak / 2**20, 1),
        "growth_mib": round((rss.peak - baseline) / 2**20, 1),
    }


def job(lines: int, name: str = "big-log") -> dict[str, Any]:
    container = {"name": "pytorch", "image": "python"}
    container["command"] = ["python", "-c", WRITER, str(lines)]
    replica = {"replicas": 1, "restartPolicy": "Never"}
    replica["template"] = {"spec": {"containers": [container]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of log the replica writes")
    parser.add_argument("--requests", type=int, default=50, help="requests per time to first byte")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "ui.json",
        help="the results file",
    )
    args = parser.parse_args()
    lines = int(args.gib * 2**30 // LINE_BYTES)
    home = Path(tempfile.mkdtemp(prefix="trainop-ui-bench-"))
    os.environ["TRAINOP_HOME"] = str(home)
    sys.path.insert(0, str(ROOT))
    from trainop_core.client import TrainingClient

    client = TrainingClient("local")
    ui = Ui(home)
    results: dict[str, Any] = {"log_gib": args.gib, "line_bytes": LINE_BYTES}
    try:
        results["ttfb_page"] = ttfb(ui, "/", args.requests)
        results["ttfb_job_list_empty"] = ttfb(ui, "/api/jobs", args.requests)
        client.create(job(lines))
        base = "/api/jobs/default/big-log"
        # Until the writer's "written": the stream starts at the last 500 lines, then follows.
        results["follow"] = follow(ui, f"{base}/logs", lines + 1, "lines", b'"written"')
        results["tail_first_lines_s"] = first_lines(ui, f"{base}/logs?tail=500")
        results["metrics"] = follow(ui, f"{base}/metrics", lines, "points")
        results["ttfb_job_list_one_job"] = ttfb(ui, "/api/jobs", args.requests)
        client.delete("big-log")
        client.create(job(lines, "stalled-log"))
        results["stalled"] = stalled(ui, client, "stalled-log")
    finally:
        ui.stop()
        for name in ("big-log", "stalled-log"):
            with contextlib.suppress(Exception):  # deleted above, or never created
                client.delete(name)
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
