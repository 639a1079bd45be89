"""Minimal torch.distributed (gloo) all-reduce benchmark.

Works under any launcher that sets the standard env:// variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): a PyTorchJob run by
``trainop run examples/pytorch/allreduce_bench.yaml`` (1 Master + 3 Workers) or
``torchrun --standalone --nproc-per-node 4 examples/pytorch/allreduce_bench.py``.

Rank 0 prints one machine-readable summary line:
  allreduce_bench launcher=env world_size=4 numel=1048576 iters=10 import_s=... init_s=...
  mean_ms=... min_ms=... total_s=... check=OK   (all on one line)
"""

import argparse
import os
import time

T_START = time.time()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--numel", type=int, default=1 << 20, help="floats per all-reduce (default 1M = 4 MiB)"
    )
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)

    t_init = time.time()
    dist.init_process_group(backend="gloo")
    init_s = time.time() - t_init
    rank, world = dist.get_rank(), dist.get_world_size()
    launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "env"

    x = torch.ones(args.numel)
    for _ in range(args.warmup):
        dist.all_reduce(x)
    dist.barrier()

    times = []
    for _ in range(args.iters):
        x.fill_(float(rank + 1))
        t = time.perf_counter()
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        times.append(time.perf_counter() - t)
    dist.barrier()

    expected = world * (world + 1) / 2
    ok = bool(torch.all(x == expected))
    # Slowest rank's mean is the honest number.
    mean_t = torch.tensor([sum(times) / len(times)])
    dist.all_reduce(mean_t, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(
            f"allreduce_bench launcher={launcher} world_size={world} numel={args.numel} "
            f"iters={args.iters} import_s={t_init - T_START:.2f} init_s={init_s:.2f} "
            f"mean_ms={mean_t.item() * 1e3:.2f} min_ms={min(times) * 1e3:.2f} "
            f"total_s={time.time() - T_START:.2f} check={'OK' if ok else 'FAIL'}",
            flush=True,
        )
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
