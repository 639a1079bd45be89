"""Data-parallel logistic regression with JAX across processes (CPU, gloo collectives).

Each process joins `jax.distributed.initialize` from the env trainop gives it, owns one CPU
device and one shard of the data; every step the gradients are averaged over all processes
(`lax.pmean` inside `jax.shard_map`, one gloo all-reduce), so the replicated parameters stay
identical. The data is generated here (two Gaussian blobs, fixed seed): no download.

Env contracts (either is read):
  JAXJob (kubeflow.org/v1):   COORDINATOR_ADDRESS, COORDINATOR_PORT, NUM_PROCESSES, PROCESS_ID
  TrainJob (jax-distributed): JAX_COORDINATOR_ADDRESS (host:port), JAX_NUM_PROCESSES, JAX_PROCESS_ID
Without either it runs as a single process.
"""

from __future__ import annotations

import argparse
import hashlib
import os

import numpy as np


def cluster_from_env() -> tuple[str | None, int, int]:
    """(coordinator host:port, number of processes, this process's id)."""
    env = os.environ
    if "JAX_COORDINATOR_ADDRESS" in env:  # Trainer v2's jax ML policy
        return (
            env["JAX_COORDINATOR_ADDRESS"],
            int(env["JAX_NUM_PROCESSES"]),
            int(env["JAX_PROCESS_ID"]),
        )
    if "COORDINATOR_ADDRESS" in env:  # JAXJob v1
        address = f"{env['COORDINATOR_ADDRESS']}:{env['COORDINATOR_PORT']}"
        return address, int(env["NUM_PROCESSES"]), int(env["PROCESS_ID"])
    return None, 1, 0


def make_data(n: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    centres = np.where(y[:, None] == 1, 1.0, -1.0) * (np.arange(features) % 3 == 0)
    x = centres + rng.normal(scale=1.5, size=(n, features))
    return x.astype(np.float32), y.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--features", type=int, default=12)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    # Cross-process collectives on CPU (gloo is 0.10's default; said here so it is not a guess).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address, nproc, pid = cluster_from_env()
    if address is not None:
        jax.distributed.initialize(address, num_processes=nproc, process_id=pid)
    rank, world = jax.process_index(), jax.process_count()
    print(f"rank={rank} world_size={world} devices={jax.device_count()}", flush=True)

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharded, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

    # A collective first, checkable by hand: sum over processes of (rank + 1).
    ones = jax.make_array_from_process_local_data(sharded, np.full((1,), rank + 1, np.float32))
    total = jax.jit(
        jax.shard_map(
            lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
        )
    )(ones)
    got = int(np.asarray(total.addressable_data(0))[0])
    want = world * (world + 1) // 2
    print(f"rank={rank} psum(rank+1)={got} expected={want} {'OK' if got == want else 'MISMATCH'}")

    x_all, y_all = make_data(args.samples, args.features, seed=0)
    x_test, y_test = make_data(1000, args.features, seed=1)
    shard = np.array_split(np.arange(args.samples), world)[rank]
    print(f"rank={rank} train_shard={len(shard)} of {args.samples}", flush=True)
    x = jax.make_array_from_process_local_data(sharded, x_all[shard])
    y = jax.make_array_from_process_local_data(sharded, y_all[shard])
    w = jax.make_array_from_process_local_data(replicated, np.zeros(args.features, np.float32))
    b = jax.make_array_from_process_local_data(replicated, np.zeros((), np.float32))

    def local_loss(params: tuple[jax.Array, jax.Array], xs: jax.Array, ys: jax.Array) -> jax.Array:
        wp, bp = params
        logits = xs @ wp + bp
        return jnp.mean(jnp.logaddexp(0.0, logits) - ys * logits)

    def step(
        wp: jax.Array, bp: jax.Array, xs: jax.Array, ys: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        loss, (gw, gb) = jax.value_and_grad(local_loss)((wp, bp), xs, ys)
        # The exchange: every process's gradient averaged over all processes.
        gw, gb, loss = (jax.lax.pmean(t, "data") for t in (gw, gb, loss))
        return wp - args.lr * gw, bp - args.lr * gb, loss

    train_step = jax.jit(
        jax.shard_map(
            step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P(), P()),
        )
    )
    losses = []
    for i in range(args.steps):
        w, b, loss = train_step(w, b, x, y)
        losses.append(float(np.asarray(loss.addressable_data(0))))
        if rank == 0 and (i == 0 or (i + 1) % 20 == 0):
            print(f"step={i + 1} global_loss={losses[-1]:.4f}", flush=True)
    print(
        f"rank={rank} loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f} "
        f"loss_fell={losses[-1] < losses[0] * 0.8}"
    )

    # Every process's own copy of the parameters, gathered: they must all be the same.
    w_local = np.asarray(w.addressable_data(0))
    b_local = np.asarray(b.addressable_data(0))
    local = np.concatenate([w_local, b_local[None]])
    gathered = np.asarray(multihost_utils.process_allgather(local))
    identical = bool(np.all(gathered == gathered[0]))
    digest = hashlib.sha256(local.tobytes()).hexdigest()[:16]
    print(f"rank={rank} params_sha={digest} params_identical={identical}", flush=True)

    probs = 1.0 / (1.0 + np.exp(-(x_test @ w_local + b_local)))
    accuracy = float(np.mean((probs > 0.5) == (y_test == 1)))
    if rank == 0:
        print(f"final: world_size={world} steps={args.steps}")
        print(f"accuracy={accuracy:.4f}")
        print(f"loss={losses[-1]:.4f}")
    if address is not None:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
