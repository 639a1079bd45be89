"""Launch overhead of the Ray backend: a PyTorchJob through trainop vs Ray Train's TorchTrainer.

    python benchmarks/ray_launch.py [--runs 5] [--files shared|upload] [--address ADDR]

Both run the same gloo all-reduce (world size 4: examples/pytorch/allreduce_bench.py, 10 x 1M
floats) on the same Ray cluster, one after the other, alternating which goes first:

- trainop: `TrainingClient("ray").create(examples/pytorch/allreduce_bench.yaml)` (1 Master + 3
  Workers, one placement group of four 1-CPU bundles, a detached supervisor actor, one actor per
  replica running `python allreduce_bench.py`) until `wait` returns it Succeeded;
- Ray Train: `TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=4)).fit()`, whose
  workers run the same all-reduce in the torch process group Ray Train sets up.

Each figure is launch to finish, seen by the driver (the job's deletion and Ray Train's result
handling after fit() are not counted). Without --address a private local Ray with 4 CPUs is
started in a temporary directory and stopped at the end. Prints every run, the medians and their
ratio (goal: <= 1.20).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "examples" / "pytorch" / "allreduce_bench.yaml"
NUMEL, ITERS, WARMUP, WORKERS = 1 << 20, 10, 2, 4


def allreduce_loop(config: dict[str, Any]) -> None:
    """What allreduce_bench.py does after init_process_group, in Ray Train's process group."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(NUMEL)
    for _ in range(WARMUP):
        dist.all_reduce(x)
    dist.barrier()
    for _ in range(ITERS):
        x.fill_(float(rank + 1))
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    dist.barrier()
    assert bool(torch.all(x == world * (world + 1) / 2)), "all-reduce gave a wrong sum"


def run_trainop(client: Any) -> float:
    from trainop_core.client import is_succeeded

    started = time.perf_counter()
    job = client.create(YAML)  # deleted after each run: the name is free again
    done = client.wait(job.name, job.namespace, timeout=600)
    elapsed = time.perf_counter() - started
    if not is_succeeded(done):
        lines = [f"{line.replica} | {line.text}" for line in client.logs(job.name, job.namespace)]
        raise SystemExit("trainop job failed:\n" + "\n".join(lines[-40:]))
    client.delete(job.name, job.namespace)
    return elapsed


def run_torchtrainer(storage: Path) -> float:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    started = time.perf_counter()
    trainer = TorchTrainer(
        allreduce_loop,
        scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False),
        run_config=RunConfig(name=f"bench-{uuid.uuid4().hex[:8]}", storage_path=str(storage)),
    )
    result = trainer.fit()
    elapsed = time.perf_counter() - started
    if result.error is not None:
        raise SystemExit(f"TorchTrainer failed: {result.error}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument(
        "--files",
        choices=("shared", "upload"),
        default="shared",
        help="how the job's directory reaches the replicas (default shared: the cluster is "
        "this machine; upload ships it as runtime_env working_dir)",
    )
    parser.add_argument("--address", default=None, help="an existing cluster (default: private)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    os.environ.setdefault("RAY_TRAIN_ENABLE_STATE_TRACKING", "0")
    import ray

    temp = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))  # short: Ray's socket paths
    try:
        if args.address:
            ray.init(address=args.address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            ray.init(
                num_cpus=WORKERS,
                include_dashboard=False,
                _temp_dir=str(temp / "ray"),
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        return _measure(args, temp)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def _measure(args: argparse.Namespace, temp: Path) -> int:
    from trainop_core.backends.ray import RayBackend
    from trainop_core.client import TrainingClient

    logging.getLogger("trainop").setLevel(logging.ERROR)  # "image not pulled", once per run
    client = TrainingClient(RayBackend(files=args.files))
    launchers = {
        "trainop (ray)": lambda: run_trainop(client),
        "TorchTrainer": lambda: run_torchtrainer(temp / "train"),
    }
    results: dict[str, list[float]] = {label: [] for label in launchers}
    print(f"warm-up: one run of each (not counted); files={args.files}", flush=True)
    for launch in launchers.values():
        launch()
    for run in range(args.runs):
        order = list(launchers) if run % 2 == 0 else list(reversed(launchers))
        for label in order:
            seconds = launchers[label]()
            results[label].append(seconds)
            print(f"run {run + 1} {label:<14} {seconds:6.2f}s", flush=True)
    medians = {label: statistics.median(times) for label, times in results.items()}
    for label, median in medians.items():
        runs = ", ".join(f"{t:.2f}" for t in results[label])
        print(f"median {label:<14} {median:6.2f}s  (runs: {runs})")
    ratio = medians["trainop (ray)"] / medians["TorchTrainer"]
    verdict = "met" if ratio <= 1.20 else "NOT met"
    print(f"ratio trainop/TorchTrainer = {ratio:.3f}  (goal <= 1.20: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
