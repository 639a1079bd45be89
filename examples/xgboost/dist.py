"""Distributed XGBoost (xgboost.collective / Rabit) for a Kubeflow XGBoostJob.

Env contract (set by the operator): MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
(Master is rank 0, Worker i is rank i+1), WORKER_ADDRS, WORKER_PORT. As a Kubeflow Trainer v2
TrainJob (dist-trainjob.yaml) the xgboost ML policy's DMLC_TRACKER_URI, DMLC_TRACKER_PORT,
DMLC_TASK_ID and DMLC_NUM_WORKER say the same (node 0 is rank 0).

Like the upstream Kubeflow xgboost-operator example (xgboost-dist), the Master
replica plays two roles: it starts the RabitTracker bound to MASTER_ADDR:MASTER_PORT
*and* it is a training participant itself. So the collective has WORLD_SIZE members
(Master + N Workers), each training on its own row shard; histogram sums are
all-reduced every iteration so all members build the same trees.

Data: a deterministic generated binary-classification set (sklearn
make_classification), each rank keeps rows ``rank::world_size``.
"""

import argparse
import hashlib
import os
import socket
import time

T0 = time.time()

import numpy as np  # noqa: E402
import xgboost as xgb  # noqa: E402
from xgboost import collective  # noqa: E402
from xgboost.tracker import RabitTracker  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--max-depth", type=int, default=4)
    p.add_argument("--eta", type=float, default=0.3)
    p.add_argument("--samples", type=int, default=30000)
    args = p.parse_args()

    env = os.environ
    world = int(env.get("WORLD_SIZE") or env.get("DMLC_NUM_WORKER") or "1")
    rank = int(env.get("RANK") or env.get("DMLC_TASK_ID") or "0")
    # The tracker needs an IP (not a hostname); on Kubernetes MASTER_ADDR is the
    # master's service name, so resolve it.
    master = env.get("MASTER_ADDR") or env.get("DMLC_TRACKER_URI") or "127.0.0.1"
    master_ip = socket.gethostbyname(master)
    master_port = int(env.get("MASTER_PORT") or env.get("DMLC_TRACKER_PORT") or "9999")
    print(
        f"xgboost {xgb.__version__} rank={rank} world_size={world} "
        f"tracker={master_ip}:{master_port}",
        flush=True,
    )

    tracker = None
    if rank == 0:
        # Start the tracker first so workers that come up early can connect.
        # sortby="task": collective rank follows dmlc_task_id (= our RANK), not host order.
        tracker = RabitTracker(
            n_workers=world, host_ip=master_ip, port=master_port, sortby="task", timeout=300
        )
        tracker.start()
        print(
            f"rank=0 started RabitTracker on {master_ip}:{master_port} for n_workers={world}",
            flush=True,
        )

    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    X, y = make_classification(
        n_samples=args.samples,
        n_features=20,
        n_informative=10,
        n_redundant=4,
        flip_y=0.02,
        class_sep=0.8,
        random_state=0,
    )
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0)
    X_tr, y_tr = X_tr[rank::world], y_tr[rank::world]  # this rank's shard
    X_te, y_te = X_te[rank::world], y_te[rank::world]

    comm_args = {
        "dmlc_communicator": "rabit",
        "dmlc_tracker_uri": master_ip,
        "dmlc_tracker_port": master_port,
        "dmlc_task_id": f"{rank:05d}",  # zero-padded: the tracker sorts task ids as strings
        "dmlc_retry": int(os.environ.get("XGB_CONNECT_RETRY", "10")),  # master may start later
        "dmlc_timeout": 300,
    }
    with collective.CommunicatorContext(**comm_args):
        c_rank, c_world = collective.get_rank(), collective.get_world_size()
        print(
            f"rank={rank} collective_rank={c_rank} collective_world_size={c_world} "
            f"processor={collective.get_processor_name()} init_s={time.time() - T0:.1f}",
            flush=True,
        )
        n_local = np.array([len(y_tr)], dtype=np.float64)
        n_total = collective.allreduce(n_local, collective.Op.SUM)
        probe = collective.allreduce(np.array([c_rank + 1.0]), collective.Op.SUM)
        expected = c_world * (c_world + 1) / 2
        print(
            f"rank={rank} train_shard={len(y_tr)} all_reduce(train_shard)={int(n_total[0])} "
            f"all_reduce(rank+1)={probe[0]:.0f} expected={expected:.0f} "
            f"{'OK' if probe[0] == expected else 'MISMATCH'}",
            flush=True,
        )

        dtrain = xgb.DMatrix(X_tr, label=y_tr)
        dtest = xgb.DMatrix(X_te, label=y_te)
        params = {
            "objective": "binary:logistic",
            "tree_method": "hist",
            "max_depth": args.max_depth,
            "eta": args.eta,
            "eval_metric": ["logloss", "error"],
            "nthread": 1,
        }
        evals_result = {}
        # In distributed mode the eval metrics are aggregated over all shards.
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=args.rounds,
            evals=[(dtrain, "train"), (dtest, "test")],
            evals_result=evals_result,
            verbose_eval=10 if c_rank == 0 else False,
        )
        model_hash = hashlib.sha256(booster.save_raw("json")).hexdigest()[:16]
        # Every member must hold the same model.
        h = np.array([int(model_hash[:8], 16)], dtype=np.float64)
        same = (
            collective.allreduce(h, collective.Op.MAX)[0]
            == collective.allreduce(h, collective.Op.MIN)[0]
        )
        # Local accuracy on this shard, then all-reduce the counts for the global figure.
        pred = booster.predict(dtest) > 0.5
        counts = collective.allreduce(
            np.array([float((pred == y_te).sum()), float(len(y_te))]), collective.Op.SUM
        )
        test_acc = counts[0] / counts[1]
        print(
            f"rank={rank} model_sha256={model_hash} models_identical={bool(same)} "
            f"local_test_accuracy={(pred == y_te).mean():.4f}",
            flush=True,
        )
        if c_rank == 0:
            logloss = evals_result["test"]["logloss"][-1]
            print(
                f"final: world_size={c_world} rounds={args.rounds} test_logloss={logloss:.4f} "
                f"test_error={evals_result['test']['error'][-1]:.4f} test_accuracy={test_acc:.4f} "
                f"wall_s={time.time() - T0:.1f}",
                flush=True,
            )
            print(f"accuracy={test_acc:.4f}", flush=True)
            print(f"logloss={logloss:.4f}", flush=True)

    if tracker is not None:
        tracker.wait_for(60)
        print("rank=0 tracker finished", flush=True)


if __name__ == "__main__":
    main()
