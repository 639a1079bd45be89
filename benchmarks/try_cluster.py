"""The try-it cluster against `trainop run`: start-up, and the same example trained both ways.

    PYTHONPATH=. python benchmarks/try_cluster.py [--runs 3] [--example examples/pytorch/ddp.yaml]

Starts ``python -m trainop_core.testing.cluster`` as a user does (binaries cached) and times it
to ready (its kubeconfig printed, both process nodes Ready); then, `--runs` times, times
``kubectl apply -f EXAMPLE`` to the job's Succeeded condition (deleted between runs), and
``trainop run EXAMPLE`` (the local backend) to its exit. Prints one line per figure, the
median ratio cluster/local, and the load average before and after (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLURALS = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "XGBoostJob": "xgboostjobs"}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if check and done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def start_cluster(kubeconfig: Path) -> tuple[subprocess.Popen[str], float]:
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "trainop_core.testing.cluster", f"--kubeconfig={kubeconfig}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if "export KUBECONFIG" in line:
            return process, time.monotonic() - started
    raise SystemExit(f"the cluster exited ({process.wait()}) before it was ready")


def succeeded(kubeconfig: Path, kind: str, namespace: str, name: str) -> str:
    path = "jsonpath={.status.conditions[?(@.status=='True')].type}"
    out = kubectl(kubeconfig, "get", PLURALS[kind], "-n", namespace, name, "-o", path, check=False)
    return next((c for c in out.split() if c in ("Succeeded", "Failed")), "")


def on_cluster(kubeconfig: Path, example: Path) -> float:
    job = yaml.safe_load(example.read_text())
    kind, meta = job["kind"], job["metadata"]
    started = time.monotonic()
    kubectl(kubeconfig, "apply", "-f", str(example))
    while not (outcome := succeeded(kubeconfig, kind, meta["namespace"], meta["name"])):
        time.sleep(0.2)
    seconds = time.monotonic() - started
    kubectl(kubeconfig, "delete", "-f", str(example), "--wait=true")
    if outcome != "Succeeded":
        raise SystemExit(f"{meta['name']} ended {outcome} on the cluster")
    return seconds


def locally(example: Path, home: Path) -> float:
    trainop = shutil.which("trainop") or "trainop"
    started = time.monotonic()
    done = subprocess.run([trainop, "run", str(example)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TRAINOP_HOME": str(home)},
                          check=False)  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"trainop run failed: {done.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs each way")
    parser.add_argument(
        "--example", type=Path, default=ROOT / "examples/pytorch/ddp.yaml", help="the job"
    )
    args = parser.parse_args()
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp, "kubeconfig")
        process, ready = start_cluster(kubeconfig)
        try:
            print(f"cluster start to ready: {ready:.1f} s")
            cluster = [on_cluster(kubeconfig, args.example) for _ in range(args.runs)]
        finally:
            process.terminate()
            process.wait(60)
        local = [locally(args.example, Path(tmp, f"home-{i}")) for i in range(args.runs)]
    name = re.sub(r"^.*examples/", "examples/", str(args.example))
    print(
        f"{name} on the try-it cluster (apply to Succeeded), s: "
        f"{', '.join(f'{s:.1f}' for s in cluster)}; median {statistics.median(cluster):.1f}"
    )
    print(f"{name} with trainop run, s: {', '.join(f'{s:.1f}' for s in local)}; "
          f"median {statistics.median(local):.1f}")  # fmt: skip
    print(f"ratio cluster/local (medians): "
          f"{statistics.median(cluster) / statistics.median(local):.2f}")  # fmt: skip
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
