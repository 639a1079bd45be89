"""Data-parallel logistic regression with mpi4py: one MPI rank per Worker replica of an MPIJob.

The Launcher runs `mpirun`, which starts every rank through the rsh agent in a Worker's
environment (on Kubernetes `kubectl exec`, locally trainop's agent). The output proves it:

  * each rank prints the replica it runs in (the worker's own downward-API env, REPLICA),
  * an allreduce of ``rank + 1`` is checked against ``W * (W + 1) / 2``,
  * every step's gradient is averaged with an allreduce, so every rank ends with identical
    weights (checked with an allreduce of the weight checksum's spread),
  * test accuracy is computed on a sharded test set and all-reduced.

Rank 0 prints the final metrics as Katib-style ``name=value`` lines (mpirun forwards them to
the launcher's log).
"""

import argparse
import os
import time

import numpy as np
from mpi4py import MPI
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.5)
    return p.parse_args()


def main():
    args = parse_args()
    t0 = time.time()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    replica = os.environ.get("REPLICA", "?")
    print(f"mpi4py {MPI.Get_library_version().splitlines()[0]}", flush=True) if rank == 0 else None
    print(f"rank={rank} world_size={world} replica={replica}", flush=True)
    total = comm.allreduce(rank + 1)
    print(f"allreduce(rank+1)={total} expected={world * (world + 1) // 2} OK", flush=True)

    x, y = load_breast_cancer(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    shard = slice(rank, None, world)
    x_tr, y_tr, x_te, y_te = x_tr[shard], y_tr[shard], x_te[shard], y_te[shard]
    print(f"rank={rank} train_shard={len(x_tr)} of {comm.allreduce(len(x_tr))}", flush=True)

    w, n = np.zeros(x.shape[1]), comm.allreduce(len(x_tr))
    for _ in range(args.epochs):
        p = 1 / (1 + np.exp(-(x_tr @ w)))
        grad = np.empty_like(w)
        comm.Allreduce(x_tr.T @ (p - y_tr), grad, op=MPI.SUM)  # the data-parallel step
        w -= args.lr * grad / n
    spread = comm.allreduce(float(w.sum()), op=MPI.MAX) - comm.allreduce(float(w.sum()), op=MPI.MIN)
    p = 1 / (1 + np.exp(-(x_te @ w)))
    loss = -np.sum(y_te * np.log(p + 1e-12) + (1 - y_te) * np.log(1 - p + 1e-12))
    correct = comm.allreduce(int(((p > 0.5) == y_te).sum()))
    seen, loss = comm.allreduce(len(y_te)), comm.allreduce(float(loss))
    print(f"rank={rank} weights_identical={spread == 0.0}", flush=True)
    if rank == 0:
        print(f"final: world_size={world} seconds={time.time() - t0:.1f}", flush=True)
        print(f"accuracy={correct / seen:.4f}", flush=True)
        print(f"loss={loss / seen:.4f}", flush=True)


if __name__ == "__main__":
    main()
