"""A tiny distributed "training" for the KFP tests: gloo all_reduce over every replica, then the
primary (rank 0) prints metrics in the `name=value` contract. Seconds, not minutes, on CPU."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()
    dist.init_process_group(backend="gloo")  # env:// from the PyTorchJob env contract
    rank, world = dist.get_rank(), dist.get_world_size()
    weight = torch.tensor([4.0])
    for step in range(args.steps):
        grad = torch.tensor([float(rank + 1)]) * weight  # each rank's "gradient"
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)  # sum over ranks: weight * W(W+1)/2
        weight -= args.lr * grad / (world * (world + 1) / 2) / world
        if rank == 0:
            print(f"loss={float(weight.abs()):.6f} step={step}", flush=True)
    total = torch.tensor([1.0])
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"world_size={int(total.item())} accuracy={1.0 / (1.0 + float(weight.abs())):.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
