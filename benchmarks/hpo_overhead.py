"""Overhead of a trial being a training job: `tune_job` vs a plain Ray Tune function trainable.

    python benchmarks/hpo_overhead.py [--trials 8] [--steps 10] [--sleep 0.2] [--rounds 2]

Both searches run the same trials of examples/hpo/quadratic.py (a grid of `--trials` learning
rates, `--steps` lines of `loss=...` each, `--sleep` seconds per step) on one local Ray, with the
same CPUs per trial and FIFO scheduling. The plain trainable runs the script as a subprocess and
parses its stdout with trainop_core.report; `tune_job` makes each trial a PyTorchJob on the local
backend (a supervisor process plus a replica process, metrics read by following the primary
replica's log). The two alternate for `--rounds` rounds; the script prints every wall time, the
medians and their ratio (goal: <= 1.3).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "integrations" / "hpo"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), str(ROOT / "integrations" / "hpo"), os.environ.get("PYTHONPATH")) if p
)

import ray  # noqa: E402  (after the paths: Ray's workers inherit PYTHONPATH)
from ray import tune  # noqa: E402
from trainop_hpo import tune_job  # noqa: E402

from trainop_core.report import parse_metrics  # noqa: E402

SCRIPT = ROOT / "examples" / "hpo" / "quadratic.py"


def template(steps: int, sleep: float) -> dict[str, Any]:
    args = ["--lr", "${trialParameters.lr}", "--steps", str(steps), "--sleep", str(sleep)]
    container = {"name": "pytorch", "image": "python:3.11", "command": ["python", str(SCRIPT)]}
    master = {
        "replicas": 1,
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [{**container, "args": args}]}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bench"},
        "spec": {"pytorchReplicaSpecs": {"Master": master}},
    }


def plain_trainable(steps: int, sleep: float) -> Callable[[dict[str, Any]], None]:
    def run(config: dict[str, Any]) -> None:
        argv = [
            sys.executable,
            str(SCRIPT),
            "--lr",
            str(config["lr"]),
            "--steps",
            str(steps),
            "--sleep",
            str(sleep),
        ]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
            try:
                for line in proc.stdout or ():
                    record = parse_metrics(line)
                    if record is not None and "loss" in record.values:
                        tune.report(dict(record.values))
            finally:
                proc.kill()

    return run


def space(trials: int) -> dict[str, Any]:
    return {"lr": tune.grid_search([0.001 * 2**i for i in range(trials)])}


def run_plain(args: argparse.Namespace, storage: Path) -> float:
    trainable = tune.with_resources(plain_trainable(args.steps, args.sleep), {"cpu": args.cpus})
    tuner = tune.Tuner(
        trainable,
        param_space=space(args.trials),
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(storage), verbose=0),
    )
    started = time.perf_counter()
    grid = tuner.fit()
    elapsed = time.perf_counter() - started
    check(grid, args.trials, "plain")
    return elapsed


def run_trainop(args: argparse.Namespace, storage: Path) -> float:
    started = time.perf_counter()
    grid = tune_job(
        template(args.steps, args.sleep),
        space(args.trials),
        "loss",
        "min",
        resources_per_trial={"cpu": args.cpus},
        storage_path=storage,
    )
    elapsed = time.perf_counter() - started
    check(grid, args.trials, "tune_job")
    return elapsed


def check(grid: Any, trials: int, label: str) -> None:
    if len(grid) != trials or grid.errors:
        raise SystemExit(f"{label}: {len(grid)} trials, errors: {grid.errors}")
    best = grid.get_best_result().config["lr"]
    if abs(best - 0.008) > 1e-12:  # the grid point closest to 0.01
        raise SystemExit(f"{label}: best lr {best}, expected 0.008")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="trials: learning rates in the grid")
    parser.add_argument("--steps", type=int, default=10, help="loss lines each trial prints")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--cpus", type=float, default=0.5, help="Ray CPUs per trial")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; the two searches alternate")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # verbose=0 means silent
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="trainop-hpo-bench-"))
    os.environ["TRAINOP_HOME"] = str(work / "home")  # before ray.init: trial actors inherit it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(work / "ray"))
    try:
        times = measure(args, work)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    plain, job = statistics.median(times["plain"]), statistics.median(times["tune_job"])
    print(
        f"median: plain {plain:.2f} s, tune_job {job:.2f} s, ratio {job / plain:.2f}x "
        f"(goal <= 1.3x)"
    )
    return 0


def measure(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"plain": [], "tune_job": []}
    ideal = args.trials / min(args.trials, int(2 / args.cpus)) * args.steps * args.sleep
    print(
        f"{args.trials} trials x {args.steps} steps x {args.sleep} s, {args.cpus} CPU per "
        f"trial on 2 CPUs (pure sleep time if perfectly packed: {ideal:.1f} s)"
    )
    run_plain(args, work / "warm-up")  # Ray's worker pool and imports, for neither side
    for index in range(args.rounds):
        for label, run in (("plain", run_plain), ("tune_job", run_trainop)):
            elapsed = run(args, work / f"{label}-{index}")
            times[label].append(elapsed)
            print(f"round {index + 1}: {label:8} {elapsed:6.2f} s", flush=True)
    return times


if __name__ == "__main__":
    sys.exit(main())
