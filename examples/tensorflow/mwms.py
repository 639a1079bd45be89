"""TensorFlow MultiWorkerMirroredStrategy driven by TF_CONFIG (Kubeflow TFJob).

Every worker of the TFJob gets ``TF_CONFIG`` =
``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``.
``MultiWorkerMirroredStrategy`` reads it, starts a gRPC server on this task's
address and all-reduces gradients across workers (CPU RING collectives over gRPC).
Without TF_CONFIG the same script runs single-worker.

Data: scikit-learn's bundled breast-cancer dataset (offline). Every worker builds
the same pipeline of *global* batches; ``experimental_distribute_dataset`` with
auto-shard policy DATA hands each worker a disjoint slice of every global batch.

The model is a small 2-layer MLP trained with a custom ``strategy.run`` loop and
plain SGD on SUM-aggregated MirroredVariables: each assign is an all-reduce across
workers. (A custom loop rather than ``model.fit``: Keras 3, bundled with TF>=2.16,
does not support MultiWorkerMirroredStrategy in ``fit``.)

Worker 0 acts as chief (mwms.yaml has no Chief replica).
"""

import argparse
import json
import os
import time

T0 = time.time()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # silences the oneDNN banner

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--batch-size-per-replica", type=int, default=32)
    args = p.parse_args()

    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task", {"type": "worker", "index": 0})
    cluster = tf_config.get("cluster", {})
    print(
        f"TF {tf.__version__} task_type={task['type']} task_index={task['index']} "
        f"cluster={json.dumps(cluster)} import_s={time.time() - T0:.1f}",
        flush=True,
    )

    # Must be created before any other TF op; blocks until all workers are up.
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    is_chief = task_type in (None, "chief") or (
        task_type == "worker" and task_id == 0 and "chief" not in cluster
    )
    n = strategy.num_replicas_in_sync
    print(
        f"num_replicas_in_sync={n} task_type={task_type} task_id={task_id} is_chief={is_chief} "
        f"strategy_ready_s={time.time() - T0:.1f}",
        flush=True,
    )

    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    mu, sd = X_tr.mean(0), X_tr.std(0) + 1e-8
    X_tr, X_te = ((X_tr - mu) / sd).astype("float32"), ((X_te - mu) / sd).astype("float32")
    y_tr, y_te = y_tr.astype("float32")[:, None], y_te.astype("float32")[:, None]

    global_batch = args.batch_size_per_replica * n
    steps_per_epoch = len(X_tr) // global_batch
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = (
        tf.data.Dataset.from_tensor_slices((X_tr, y_tr))
        .shuffle(len(X_tr), seed=0, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
        .with_options(opts)
    )
    dist_iter = iter(strategy.experimental_distribute_dataset(ds))

    with strategy.scope():
        rng = np.random.default_rng(
            0
        )  # same init on every worker (MWMS also broadcasts on creation)

        def var(shape, scale):
            return tf.Variable(
                rng.normal(0, scale, shape).astype("float32"),
                aggregation=tf.VariableAggregation.SUM,
            )

        params = [
            var((X.shape[1], 32), (2 / X.shape[1]) ** 0.5),
            var((32,), 0.0),
            var((32, 1), (1 / 32) ** 0.5),
            var((1,), 0.0),
        ]

    def forward(x):
        h = tf.nn.relu(x @ params[0] + params[1])
        return h @ params[2] + params[3]

    @tf.function
    def train_step(batch):
        def step_fn(x, yb):
            with tf.GradientTape() as tape:
                logits = forward(x)
                per_ex = tf.nn.sigmoid_cross_entropy_with_logits(labels=yb, logits=logits)
                loss = tf.nn.compute_average_loss(per_ex, global_batch_size=global_batch)
            grads = tape.gradient(loss, params)
            for v, g in zip(params, grads, strict=True):
                v.assign_sub(args.lr * g)  # SUM-aggregated: all-reduced across all workers
            correct = tf.reduce_sum(
                tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), yb), tf.float32)
            )
            return loss, correct, tf.cast(tf.shape(x)[0], tf.float32)

        return strategy.run(step_fn, args=batch)

    for epoch in range(1, args.epochs + 1):
        g_loss = g_correct = g_seen = l_seen = 0.0
        for _ in range(steps_per_epoch):
            loss, correct, seen = train_step(next(dist_iter))
            g_loss += float(strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))
            g_correct += float(strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None))
            g_seen += float(strategy.reduce(tf.distribute.ReduceOp.SUM, seen, axis=None))
            l_seen += float(sum(t.numpy() for t in strategy.experimental_local_results(seen)))
        print(
            f"epoch={epoch} task={task_type}:{task_id} local_examples={int(l_seen)} "
            f"global_examples={int(g_seen)} train_loss={g_loss / steps_per_epoch:.4f} "
            f"train_accuracy={g_correct / g_seen:.4f}",
            flush=True,
        )

    # Weights are identical on every worker; evaluate locally on the small test set.
    logits = forward(tf.constant(X_te)).numpy()
    test_acc = float(((logits > 0) == (y_te > 0.5)).mean())
    z = y_te * np.log1p(np.exp(-logits)) + (1 - y_te) * np.log1p(np.exp(logits))
    test_loss = float(z.mean())
    checksum = float(sum(np.sum(v.numpy(), dtype=np.float64) for v in params))
    print(
        f"task={task_type}:{task_id} weight_checksum={checksum:.6f} test_loss={test_loss:.4f} "
        f"test_accuracy={test_acc:.4f}",
        flush=True,
    )
    if is_chief:
        print(
            f"final: num_replicas_in_sync={n} global_batch={global_batch} "
            f"steps_per_epoch={steps_per_epoch} final_train_loss={g_loss / steps_per_epoch:.4f} "
            f"wall_s={time.time() - T0:.1f}",
            flush=True,
        )
        print(f"loss={test_loss:.4f}", flush=True)
        print(f"accuracy={test_acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
