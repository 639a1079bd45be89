"""PyTorch DistributedDataParallel (gloo, CPU) on scikit-learn's bundled digits dataset.

Launched by a PyTorchJob: every replica gets the Kubeflow env contract
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), so ``init_process_group`` with the
default ``env://`` init method just works. Also runs under ``torchrun``.

The output is meant to *prove* that training was distributed:
  * each rank prints the size of its DistributedSampler shard (they sum to the
    training-set size),
  * an all_reduce of ``rank + 1`` is checked against ``W * (W + 1) / 2``,
  * gradients are averaged by DDP, so every rank ends with identical weights
    (checked with an all_reduce of a parameter checksum),
  * test accuracy is computed on a sharded test set and all-reduced.

Rank 0 prints its progress after each epoch (``progressPercentage=`` and
``estimatedRemainingSeconds=``, which trainop shows as the job's progress) and the final metrics
as Katib-style ``name=value`` lines.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    t0 = time.time()

    if "RANK" not in os.environ:  # plain `python ddp.py`: single-process world
        os.environ.update(
            RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
        )
    dist.init_process_group(backend="gloo")  # env:// -> MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank={rank} world_size={world} "
        f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
        f"init_s={time.time() - t0:.2f}",
        flush=True,
    )

    # Proof of communication: sum of (rank + 1) over all ranks must be W(W+1)/2.
    probe = torch.tensor([float(rank + 1)])
    dist.all_reduce(probe, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    print(
        f"rank={rank} all_reduce(rank+1)={probe.item():.0f} expected={expected:.0f} "
        f"{'OK' if probe.item() == expected else 'MISMATCH'}",
        flush=True,
    )

    # Data: identical split on every rank (fixed random_state); the sampler shards it.
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=42, stratify=y)
    train_ds = TensorDataset(torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr))
    test_ds = TensorDataset(torch.tensor(X_te, dtype=torch.float32), torch.tensor(y_te))
    train_sampler = DistributedSampler(
        train_ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed
    )
    # drop_last=False pads the last shard by repeating samples; fine for a demo metric.
    test_sampler = DistributedSampler(test_ds, num_replicas=world, rank=rank, shuffle=False)
    train_dl = DataLoader(train_ds, batch_size=args.batch_size, sampler=train_sampler)
    test_dl = DataLoader(test_ds, batch_size=256, sampler=test_sampler)
    print(
        f"rank={rank} train_shard={len(train_sampler)} of {len(train_ds)} "
        f"test_shard={len(test_sampler)} of {len(test_ds)}",
        flush=True,
    )

    torch.manual_seed(args.seed)  # same init everywhere (DDP also broadcasts rank 0's weights)
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def evaluate():
        model.eval()
        stats = torch.zeros(3)  # loss_sum, correct, count
        with torch.no_grad():
            for xb, yb in test_dl:
                out = model(xb)
                stats[0] += loss_fn(out, yb).item() * len(yb)
                stats[1] += (out.argmax(1) == yb).sum().item()
                stats[2] += len(yb)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        model.train()
        return stats[0].item() / stats[2].item(), stats[1].item() / stats[2].item()

    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        tot = torch.zeros(3)  # loss_sum, correct, count (this rank's shard)
        for xb, yb in train_dl:
            opt.zero_grad()
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()  # DDP all-reduces (averages) gradients here
            opt.step()
            tot += torch.tensor(
                [loss.item() * len(yb), (out.argmax(1) == yb).sum().item(), len(yb)]
            )
        local_loss, local_acc = tot[0].item() / tot[2].item(), tot[1].item() / tot[2].item()
        dist.all_reduce(tot, op=dist.ReduceOp.SUM)
        print(
            f"epoch={epoch} rank={rank} local_loss={local_loss:.4f} local_acc={local_acc:.4f} "
            f"global_train_loss={tot[0].item() / tot[2].item():.4f} "
            f"global_train_acc={tot[1].item() / tot[2].item():.4f} "
            f"samples_seen={int(tot[2].item())}",
            flush=True,
        )
        if rank == 0:  # the job's progress (Kubeflow Trainer's trainerStatus; docs/progress.md)
            per_epoch = (time.time() - t0) / epoch
            print(
                f"progressPercentage={100 * epoch // args.epochs} "
                f"estimatedRemainingSeconds={per_epoch * (args.epochs - epoch):.0f}",
                flush=True,
            )

    test_loss, test_acc = evaluate()

    # All replicas must hold identical weights after DDP training.
    checksum = torch.tensor(
        [sum(p.detach().double().sum().item() for p in model.parameters())], dtype=torch.float64
    )
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    in_sync = all(abs(g.item() - checksum.item()) < 1e-6 for g in gathered)
    print(
        f"rank={rank} param_checksum={checksum.item():.6f} replicas_in_sync={in_sync}", flush=True
    )

    if rank == 0:
        print(
            f"final: world_size={world} test_loss={test_loss:.4f} test_accuracy={test_acc:.4f} "
            f"wall_s={time.time() - t0:.1f}",
            flush=True,
        )
        # Katib (StdOut metrics collector) style: name=value
        print(f"accuracy={test_acc:.4f}", flush=True)
        print(f"loss={test_loss:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
