"""MXNet parameter-server training (kvstore ``dist_sync``) for a Kubeflow MXJob.

Env contract (set by the operator): DMLC_PS_ROOT_URI / DMLC_PS_ROOT_PORT (the
scheduler's address), DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_ROLE
(scheduler|server|worker), DMLC_USE_KUBERNETES=1, DMLC_WORKER_ID (workers), MX_CONFIG.

All roles run this same script. For DMLC_ROLE=scheduler/server, ``import mxnet``
itself never returns normally: MXNet's kvstore_server module creates the
``dist`` kvstore, serves (scheduler: node registry/barriers; server: holds the
parameters and runs the optimizer) until all workers have finished, then exits
the process. Workers train a small softmax-regression/MLP with a Gluon Trainer on
the ``dist_sync`` kvstore: gradients are pushed to the server(s), aggregated over
all workers and the updated weights are pulled back.

Requires MXNet 1.9.1 + numpy<1.24: run ``bash setup_venv.sh`` in this directory first
(creates .venv; ps.yaml's command is ``.venv/bin/python ps_train.py``).
"""

import argparse
import os
import socket
import sys
import time

T0 = time.time()


def _ensure_node_host():
    """ps-lite binds servers/workers to the IP of the first non-loopback interface
    unless DMLC_NODE_HOST (or DMLC_INTERFACE) says otherwise. When the scheduler is on
    loopback (trainop's local backend), every node must also advertise 127.0.0.1 or
    the scheduler hands out unreachable addresses. On Kubernetes (scheduler behind a
    service name) this is a no-op.
    """
    if os.environ.get("DMLC_NODE_HOST") or os.environ.get("DMLC_INTERFACE"):
        return
    root = os.environ.get("DMLC_PS_ROOT_URI", "")
    try:
        is_loopback = socket.gethostbyname(root).startswith("127.") if root else False
    except OSError:
        is_loopback = False
    if is_loopback:
        os.environ["DMLC_NODE_HOST"] = "127.0.0.1"


def _env(name):
    return os.environ.get(name)


_ensure_node_host()
ROLE = os.environ.get("DMLC_ROLE", "worker")
if ROLE in ("scheduler", "server"):
    print(
        f"role={ROLE} root={_env('DMLC_PS_ROOT_URI')}:{_env('DMLC_PS_ROOT_PORT')} "
        f"num_server={_env('DMLC_NUM_SERVER')} num_worker={_env('DMLC_NUM_WORKER')} serving...",
        flush=True,
    )

import mxnet as mx  # noqa: E402  (scheduler/server: serves here, then exits)
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

if ROLE in ("scheduler", "server"):  # only reached if the kvstore server module returned
    print(f"role={ROLE} done", flush=True)
    sys.exit(0)


def make_data(n=6000, d=20, k=4, seed=0):
    """Deterministic synthetic k-class data (same on every worker; each keeps a shard)."""
    rng = np.random.RandomState(seed)
    centers = rng.normal(0, 0.5, (k, d))
    y = rng.randint(0, k, n)
    X = centers[y] + rng.normal(0, 1.0, (n, d))
    return X.astype("float32"), y.astype("float32")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--kvstore", default="dist_sync")
    args = p.parse_args()

    kv = mx.kv.create(args.kvstore)
    # NB: ps-lite assigns worker ranks in registration order; kv.rank need not equal
    # DMLC_WORKER_ID. Use kv.rank for sharding (it is what the servers see).
    rank, nw = kv.rank, kv.num_workers
    print(
        f"mxnet {mx.__version__} role=worker rank={rank} num_workers={nw} kvstore={kv.type} "
        f"DMLC_WORKER_ID={os.environ.get('DMLC_WORKER_ID')} init_s={time.time() - T0:.1f}",
        flush=True,
    )

    # Proof of aggregation on the servers: every worker pushes rank+1, the pull is the sum.
    kv.init(999, mx.nd.zeros((1,)))
    kv.push(999, mx.nd.array([rank + 1.0]))
    out = mx.nd.zeros((1,))
    kv.pull(999, out=out)
    expected = nw * (nw + 1) / 2
    print(
        f"rank={rank} kv push(rank+1)->pull={out.asscalar():.0f} expected={expected:.0f} "
        f"{'OK' if out.asscalar() == expected else 'MISMATCH'}",
        flush=True,
    )

    X, y = make_data()
    n_tr = int(len(X) * 0.8)
    X_tr, y_tr, X_te, y_te = X[:n_tr], y[:n_tr], X[n_tr:], y[n_tr:]
    X_tr, y_tr = X_tr[rank::nw], y_tr[rank::nw]  # this worker's shard
    print(f"rank={rank} train_shard={len(y_tr)} of {n_tr}", flush=True)
    train_iter = mx.io.NDArrayIter(
        X_tr, y_tr, batch_size=args.batch_size, shuffle=True, last_batch_handle="discard"
    )

    mx.random.seed(0)
    np.random.seed(rank)  # NDArrayIter shuffles with numpy's global RNG
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier())  # the kvstore broadcasts worker 0's initial weights
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    # update_on_kvstore: the optimizer runs on the server(s) over the aggregated gradient.
    trainer = gluon.Trainer(
        net.collect_params(),
        "sgd",
        {"learning_rate": args.lr, "momentum": 0.9},
        kvstore=kv,
        update_on_kvstore=True,
    )

    for epoch in range(1, args.epochs + 1):
        train_iter.reset()
        tot_loss, correct, seen = 0.0, 0.0, 0
        for batch in train_iter:
            data, label = batch.data[0], batch.label[0]
            with autograd.record():
                out = net(data)
                loss = loss_fn(out, label)
            loss.backward()
            # step(bs * nw): gradients are summed over all workers on the server.
            trainer.step(args.batch_size * nw)
            tot_loss += loss.sum().asscalar()
            correct += (out.argmax(axis=1) == label).sum().asscalar()
            seen += data.shape[0]
        print(
            f"epoch={epoch} rank={rank} train_loss={tot_loss / seen:.4f} "
            f"train_acc={correct / seen:.4f} local_samples={seen}",
            flush=True,
        )

    pred = net(mx.nd.array(X_te)).argmax(axis=1).asnumpy()
    test_acc = float((pred == y_te).mean())
    w = sum(float(p.data().sum().asscalar()) for p in net.collect_params().values())
    print(
        f"rank={rank} weight_checksum={w:.5f} test_accuracy={test_acc:.4f} "
        f"final_loss={tot_loss / seen:.4f}",
        flush=True,
    )
    # The job's result is worker 0's (the replica trainop, the trial runner, KFP and Flyte read
    # metrics from), which is not always kvstore rank 0: ps-lite ranks by registration order.
    if os.environ.get("DMLC_WORKER_ID", "0") == "0":
        print(
            f"final: num_workers={nw} num_servers={os.environ.get('DMLC_NUM_SERVER')} "
            f"test_accuracy={test_acc:.4f} loss={tot_loss / seen:.4f} "
            f"wall_s={time.time() - T0:.1f}",
            flush=True,
        )
        print(f"accuracy={test_acc:.4f}", flush=True)
        print(f"loss={tot_loss / seen:.4f}", flush=True)
    kv.barrier() if hasattr(
        kv, "barrier"
    ) else None  # workers finish together (exit signals servers)


if __name__ == "__main__":
    main()
