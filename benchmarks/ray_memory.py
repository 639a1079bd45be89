"""Head-node memory of the Ray backend with many chatty jobs.

    python benchmarks/ray_memory.py [--jobs 50] [--mib 24] [--head-memory 4Gi]

Starts a private one-node Ray cluster (`ray start --head`, 2 CPUs, its Ray `memory` resource set
to `--head-memory`, token authentication on, everything under a temporary directory) and submits
`--jobs` TFJobs, one after the other, each with one replica (0.05 CPU) that prints `--mib` MiB
of 1 KiB lines as fast as it can and exits. A job refused at submit is counted, not retried.
Once every accepted job has finished, it prints the memory of the cluster's processes (this
node is the head node: its GCS, raylet, the jobs' supervisors and idle workers): RSS and PSS
(from /proc/<pid>/smaps_rollup), before any job and after, the supervisors' total and largest,
and, sampled every 2 s while the jobs ran, the peak of both and of the replicas' output on the
node's disk (files under the replicas' temporary directories). The driver is this process; its
own memory is not counted. The cluster's processes (found by a tag in their environment) are
killed at the end; `ray stop` is never called (it would stop every Ray on the machine).

Run it with the checkout to measure first on the path (PYTHONPATH): it uses only the public
client, so an older checkout is measured the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

RAY = str(Path(sys.executable).parent / "ray")
TAG_ENV = "TRAINOP_RAY_MEMORY_BENCH"
MIB = 1024**2


def chatty_job(name: str, mib: int) -> dict[str, Any]:
    code = (
        "import sys\n"
        "line = 'x' * 1023 + '\\n'\n"
        f"for _ in range({mib} * 1024):\n"
        "    sys.stdout.write(line)\n"
        "print('last line', flush=True)\n"
    )
    container = {
        "name": "tensorflow",
        "image": "python",
        "command": ["python", "-c", code],
        "resources": {"requests": {"cpu": "50m"}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}
            }
        },
    }


# --- measuring --------------------------------------------------------------------------------
def cluster_processes(tag: str) -> list[int]:
    """Pids of the cluster's processes (they carry `TAG_ENV=tag` in their environment)."""
    marker = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def rss_pss(pid: int) -> tuple[int, int]:
    """Bytes of RSS and PSS of `pid` (0, 0 if it is gone)."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


def name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def snapshot(tag: str) -> dict[str, Any]:
    pids = cluster_processes(tag)
    sizes = {pid: rss_pss(pid) for pid in pids}
    supervisors = [sizes[p] for p in pids if name_of(p).startswith("ray::Supervisor")]
    return {
        "processes": len(pids),
        "rss": sum(r for r, _ in sizes.values()),
        "pss": sum(p for _, p in sizes.values()),
        "supervisors": len(supervisors),
        "supervisors_rss": sum(r for r, _ in supervisors),
        "supervisors_pss": sum(p for _, p in supervisors),
        "largest_supervisor_rss": max((r for r, _ in supervisors), default=0),
    }


def output_on_disk() -> int:
    """Bytes in regular files under the replicas' temporary directories on this node."""
    total = 0
    for directory in Path(tempfile.gettempdir()).glob("trainop-replica-*"):
        for path in directory.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink():
                    total += path.stat().st_size
            except OSError:
                continue
    return total


def show(label: str, figures: dict[str, Any]) -> None:
    print(
        f"{label}: {figures['processes']} processes, RSS {figures['rss'] / MIB:,.0f} MiB, "
        f"PSS {figures['pss'] / MIB:,.0f} MiB; {figures['supervisors']} supervisors: "
        f"RSS {figures['supervisors_rss'] / MIB:,.0f} MiB, PSS "
        f"{figures['supervisors_pss'] / MIB:,.0f} MiB, largest RSS "
        f"{figures['largest_supervisor_rss'] / MIB:,.0f} MiB",
        flush=True,
    )


# --- the cluster ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_cluster(temp: Path, tag: str, head_memory: str) -> tuple[str, dict[str, str]]:
    """`ray start --head` under `temp`; its address and the env a driver needs to join it."""
    from trainop_core.gang import parse_quantity

    token = uuid.uuid4().hex
    env = {
        **os.environ,
        TAG_ENV: tag,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "HOME": str(temp / "home"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    (temp / "home").mkdir()
    port = free_port()
    memory = int(parse_quantity(head_memory))
    command = [RAY, "start", "--head", "--port", str(port), "--num-cpus", "2"]
    command += ["--memory", str(memory), "--temp-dir", str(temp / "ray")]
    command += ["--include-dashboard", "false", "--disable-usage-stats"]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=180)
    return f"127.0.0.1:{port}", env


def stop_cluster(tag: str) -> None:
    """Kill this cluster's processes, and only them (never `ray stop`: it stops every Ray on
    the machine)."""
    for _ in range(50):
        pids = cluster_processes(tag)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


class Sampler(threading.Thread):
    """The peak of the cluster's memory and of the output on disk while jobs run."""

    def __init__(self, tag: str) -> None:
        super().__init__(daemon=True)
        self.tag = tag
        self.peak: dict[str, Any] = {"rss": 0, "pss": 0, "disk": 0}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(2.0):
            figures = snapshot(self.tag)
            for key in ("rss", "pss"):
                self.peak[key] = max(self.peak[key], figures[key])
            self.peak["disk"] = max(self.peak["disk"], output_on_disk())


# --- the run ----------------------------------------------------------------------------------
def submit_all(client: Any, jobs: int, mib: int) -> tuple[list[str], list[str]]:
    from trainop_core.errors import TrainopError

    accepted, refused = [], []
    for i in range(jobs):
        name = f"chatty-{i:03}"
        try:
            client.create(chatty_job(name, mib))
            accepted.append(name)
        except TrainopError as exc:
            refused.append(f"{name}: {str(exc).splitlines()[0][:200]}")
    return accepted, refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50, help="TFJobs submitted")
    parser.add_argument("--mib", type=int, default=24, help="output of each replica, MiB")
    parser.add_argument("--head-memory", default="4Gi", help="the head's Ray memory resource")
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="rm-", dir="/tmp"))  # short: Ray's socket paths
    tag = uuid.uuid4().hex
    env: dict[str, str] = {}
    try:
        address, env = start_cluster(temp, tag, args.head_memory)
        os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")})
        from trainop_core.backends.ray import RayBackend
        from trainop_core.client import TrainingClient

        client = TrainingClient(RayBackend(address, files="shared"))
        time.sleep(5)  # a benchmark, not a test: let the fresh cluster's processes settle
        before = snapshot(tag)
        show("before any job", before)
        started = time.monotonic()
        sampler = Sampler(tag)
        sampler.start()
        accepted, refused = submit_all(client, args.jobs, args.mib)
        for name in accepted:
            client.wait(name, timeout=1800)
        sampler.done.set()
        sampler.join()
        print(f"{len(accepted)} jobs accepted and finished, {len(refused)} refused at submit "
              f"({time.monotonic() - started:,.0f} s)", flush=True)  # fmt: skip
        if refused:
            print(f"first refusal: {refused[0]}")
        after = snapshot(tag)
        show(f"after {args.jobs} jobs of {args.mib} MiB output each", after)
        peak = sampler.peak
        print(f"peak while jobs ran: RSS {peak['rss'] / MIB:,.0f} MiB, PSS "
              f"{peak['pss'] / MIB:,.0f} MiB; replicas' output on the node's disk at most "
              f"{peak['disk'] / MIB:,.1f} MiB")  # fmt: skip
        print(f"growth: RSS {(after['rss'] - before['rss']) / MIB:+,.0f} MiB, "
              f"PSS {(after['pss'] - before['pss']) / MIB:+,.0f} MiB")  # fmt: skip
        for name in accepted:
            client.delete(name)
        return 0
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if env:
            stop_cluster(tag)
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
