"""Launch overhead of the local backend: `trainop run` vs `torchrun`, same 4-process all-reduce.

    python benchmarks/local_launch.py [--runs 5]

Runs examples/pytorch/allreduce_bench.py (gloo, world size 4) as a PyTorchJob of 1 Master + 3
Workers with `trainop run examples/pytorch/allreduce_bench.yaml` and with
`torchrun --standalone --nproc-per-node 4`, alternating the two, and prints each wall time (the
launcher's process start to its exit), the medians and their ratio (goal: <= 1.10).
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

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "examples" / "pytorch" / "allreduce_bench.yaml"
SCRIPT = ROOT / "examples" / "pytorch" / "allreduce_bench.py"
SUMMARY = re.compile(r"allreduce_bench .*check=OK")


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TRAINOP_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _trainop(home: Path) -> list[str]:
    return [sys.executable, "-m", "trainop_core", "run", str(YAML)]


def _torchrun(home: Path) -> list[str]:
    torchrun = shutil.which("torchrun") or "torchrun"
    return [torchrun, "--standalone", "--nproc-per-node", "4", str(SCRIPT)]


def timed(argv_for: object, label: str) -> tuple[float, str]:
    """Wall seconds of one launch (a fresh TRAINOP_HOME: the job name is free) and rank 0's line."""
    with tempfile.TemporaryDirectory(prefix="trainop-bench-") as tmp:
        argv = argv_for(Path(tmp))  # type: ignore[operator]
        started = time.perf_counter()
        done = subprocess.run(argv, env=_env(Path(tmp)), capture_output=True, text=True, cwd=ROOT)
        elapsed = time.perf_counter() - started
    output = done.stdout + done.stderr
    match = SUMMARY.search(output)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"{label} failed (exit {done.returncode}):\n{output[-3000:]}")
    return elapsed, match.group(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per launcher (default 5)")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"trainop run": [], "torchrun": []}
    launchers = {"trainop run": _trainop, "torchrun": _torchrun}
    for run in range(args.runs):
        order = list(launchers) if run % 2 == 0 else list(reversed(launchers))
        for label in order:
            seconds, line = timed(launchers[label], label)
            results[label].append(seconds)
            print(f"run {run + 1} {label:<12} {seconds:6.2f}s  | {line}", flush=True)
    medians = {label: statistics.median(times) for label, times in results.items()}
    for label, median in medians.items():
        runs = ", ".join(f"{t:.2f}" for t in results[label])
        print(f"median {label:<12} {median:6.2f}s  (runs: {runs})")
    ratio = medians["trainop run"] / medians["torchrun"]
    verdict = "met" if ratio <= 1.10 else "NOT met"
    print(f"ratio trainop/torchrun = {ratio:.3f}  (goal <= 1.10: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
