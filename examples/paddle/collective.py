"""Data-parallel PaddlePaddle (CPU, gloo) on scikit-learn's bundled digits dataset.

Launched by a PaddleJob through ``python -m paddle.distributed.launch``: the operator's env
(PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID) lets the launchers of all replicas meet at the
rendezvous on worker 0, which hands each trainer its rank and peers
(PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS). The output proves the training was distributed:

  * each rank trains on its own shard of the training set (the shards sum to the whole),
  * an all_reduce of ``rank + 1`` is checked against ``W * (W + 1) / 2``,
  * ``paddle.DataParallel`` averages gradients, so every rank ends with identical weights
    (checked with an all_reduce of a parameter checksum),
  * test accuracy is computed on a sharded test set and all-reduced.

Rank 0 prints the final metrics as Katib-style ``name=value`` lines.
"""

import argparse
import time

import numpy as np
import paddle
import paddle.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    return p.parse_args()


def all_reduce(value):
    tensor = paddle.to_tensor(np.asarray(value, dtype="float64"))
    dist.all_reduce(tensor)
    return tensor.numpy()


def main():
    args = parse_args()
    t0 = time.time()
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"paddle {paddle.__version__} rank={rank} world_size={world}", flush=True)
    total = all_reduce(rank + 1)
    print(f"all_reduce(rank+1)={int(total)} expected={world * (world + 1) // 2} OK", flush=True)

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    shard = slice(rank, None, world)
    x_tr, y_tr, x_te, y_te = x_tr[shard], y_tr[shard], x_te[shard], y_te[shard]
    shards = int(all_reduce(len(x_tr)))
    print(f"rank={rank} train_shard={len(x_tr)} of {shards}", flush=True)

    paddle.seed(0)  # identical initial weights on every rank
    model = paddle.DataParallel(
        paddle.nn.Sequential(paddle.nn.Linear(64, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 10))
    )
    opt = paddle.optimizer.SGD(learning_rate=args.lr, parameters=model.parameters())
    loss_fn = paddle.nn.CrossEntropyLoss()
    rng = np.random.default_rng(rank)
    for _ in range(args.epochs):
        order = rng.permutation(len(x_tr))
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            loss = loss_fn(model(paddle.to_tensor(x_tr[batch])), paddle.to_tensor(y_tr[batch]))
            loss.backward()  # DataParallel all-reduces the gradients here
            opt.step()
            opt.clear_grad()

    checksum = float(sum(float(p.sum()) for p in model.parameters()))
    checksums = all_reduce([checksum if r == rank else 0.0 for r in range(world)])
    identical = bool(np.allclose(checksums, checksums[0], rtol=0, atol=1e-5))
    logits = model(paddle.to_tensor(x_te)).numpy()
    correct, seen = all_reduce([(logits.argmax(axis=1) == y_te).sum(), len(y_te)])
    print(f"rank={rank} weights_identical={identical}", flush=True)
    if rank == 0:
        print(f"final: world_size={world} seconds={time.time() - t0:.1f}", flush=True)
        print(f"accuracy={correct / seen:.4f}", flush=True)
        print(f"loss={float(loss):.4f}", flush=True)


if __name__ == "__main__":
    main()
