"""Tasks the Flyte tests run. A module of its own: every replica imports it by name, as
`pyflyte-execute` does in a pod, so it must import cheaply and hold no test code."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

from flytekit import PodTemplate, Resources, task, workflow
from trainop_flyte import (
    MPI,
    CleanPodPolicy,
    MXNet,
    Paddle,
    PyTorch,
    Replica,
    RestartPolicy,
    RunPolicy,
    TensorFlow,
    TrainJob,
    XGBoost,
)


def _env(*names: str) -> dict[str, str]:
    return {name: os.environ.get(name, "") for name in names}


@task(task_config=PyTorch(workers=1, run_policy=RunPolicy(backoff_limit=0)))
def pytorch_env(tag: str) -> dict[str, str]:
    """Each replica reports its contract env; the task's output is the master's report."""
    seen = _env("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TRAINOP_REPLICA_TYPE")
    return {**seen, "tag": tag, "pid": str(os.getpid())}


@workflow
def pytorch_env_wf(tag: str = "wf") -> dict[str, str]:
    return pytorch_env(tag=tag)


@task(task_config=PyTorch(workers=2, run_policy=RunPolicy(backoff_limit=0)))
def rank_sum(offset: int) -> int:
    """All-reduce (gloo) of every replica's rank: 1 master + 2 workers give 0 + 1 + 2."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return int(total.item()) + offset


@workflow
def rank_sum_wf(offset: int = 0) -> int:
    return rank_sum(offset=offset)


@task(task_config=PyTorch(workers=2, worker=Replica(restart_policy=RestartPolicy.NEVER)))
def worker_fails() -> str:
    """Worker 1 (rank 2) raises at once; the master waits, however long the worker takes to
    start (a fixed 6 s raced a loaded machine), until the job's failure stops it."""
    return _worker_two_fails()


def _worker_two_fails() -> str:
    if os.environ.get("RANK") == "2":
        raise ValueError("worker two exploded")
    time.sleep(60)  # the master: the task must not wait for it
    return "unreachable"


@task(task_config=PyTorch(workers=2))
def worker_fails_by_default() -> str:
    """No restart policy set: worker 1 (rank 2) raises at once and fails the task."""
    return _worker_two_fails()


@task(task_config=PyTorch(workers=2, compat=True))
def worker_fails_by_default_compat() -> str:
    """The same as a compat-mode task (Flyte's own `pytorch` type)."""
    return _worker_two_fails()


@task(task_config=TensorFlow(workers=1, chief=True))
def tf_config() -> str:
    """Each replica checks that TF_CONFIG names it; the output is the chief's TF_CONFIG."""
    config = json.loads(os.environ["TF_CONFIG"])
    if config["task"]["type"] != os.environ["TRAINOP_REPLICA_TYPE"].lower():
        raise RuntimeError(f"TF_CONFIG {config['task']} is not this replica's")
    return json.dumps(config, sort_keys=True)


@task(task_config=TensorFlow(workers=1, chief=True))
def tf_mwms() -> int:
    """MultiWorkerMirroredStrategy over chief + worker: one replica in sync per process."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        value = strategy.reduce(
            tf.distribute.ReduceOp.SUM,
            strategy.run(lambda: tf.constant(1.0)),
            axis=None,
        )
    return int(strategy.num_replicas_in_sync * 100 + int(value.numpy()))


@task(task_config=XGBoost(workers=2))
def xgb_train(rounds: int) -> dict[str, float]:
    """Tiny distributed XGBoost: the master runs the tracker, all three train on row shards."""
    import socket

    import numpy as np
    import xgboost as xgb
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host = socket.gethostbyname(os.environ["MASTER_ADDR"])
    port = int(os.environ["MASTER_PORT"])
    tracker = None
    if rank == 0:
        tracker = RabitTracker(n_workers=world, host_ip=host, port=port, sortby="task")
        tracker.start()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    shard = slice(rank, None, world)
    comm = {
        "dmlc_communicator": "rabit",
        "dmlc_tracker_uri": host,
        "dmlc_tracker_port": port,
        "dmlc_task_id": f"{rank:05d}",
        "dmlc_retry": 10,
        "dmlc_timeout": 120,
    }
    with collective.CommunicatorContext(**comm):
        size = collective.get_world_size()
        rows = collective.allreduce(np.array([float(len(y[shard]))]), collective.Op.SUM)[0]
        params = {"objective": "binary:logistic", "tree_method": "hist", "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(x[shard], label=y[shard]), num_boost_round=rounds)
        accuracy = float(((booster.predict(xgb.DMatrix(x)) > 0.5) == y).mean())
    if tracker is not None:
        tracker.wait_for(60)
    return {"world_size": float(size), "rows": float(rows), "accuracy": accuracy}


@task(task_config=MXNet(workers=2, servers=1))
def mxnet_ps_report(epochs: int) -> dict[str, str]:
    """Every replica runs the MXNet example in its own venv (examples/mxnet/setup_venv.sh) and
    reports who it is and the metrics it printed; the task's value is the primary replica's."""
    import subprocess
    from pathlib import Path

    from trainop_core.report import collect_metrics

    example = Path(__file__).resolve().parents[2] / "examples" / "mxnet"
    argv = [str(example / ".venv" / "bin" / "python"), "ps_train.py", "--epochs", str(epochs)]
    done = subprocess.run(argv, cwd=example, capture_output=True, text=True, check=True)
    seen = collect_metrics(done.stdout.splitlines())
    who = {"role": os.environ["DMLC_ROLE"], "worker_id": os.environ.get("DMLC_WORKER_ID", "")}
    return {**who, **{name: str(value) for name, value in seen.items()}}


MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # CI is root


@task(task_config=MPI(workers=2), environment=MPI_ENV)
def mpi_allreduce(offset: int) -> dict[str, str]:
    """mpirun on the launcher starts one rank per worker, each running this function in its
    worker's environment; the task's value is rank 0's."""
    from mpi4py import MPI as mpi

    comm = mpi.COMM_WORLD
    return {
        "sum": str(comm.allreduce(comm.Get_rank() + 1) + offset),
        "size": str(comm.Get_size()),
        "rank": str(comm.Get_rank()),
        "replica": f"{os.environ['TRAINOP_REPLICA_TYPE']}-{os.environ['TRAINOP_REPLICA_INDEX']}",
    }


@task(task_config=TrainJob(runtime="mpi-distributed", num_nodes=2), environment=MPI_ENV)
def trainjob_mpi_allreduce(offset: int) -> dict[str, str]:
    """The same function on the mpi-distributed runtime: the launcher's mpirun starts one rank
    per node; the task's value is rank 0's."""
    return mpi_allreduce.task_function(offset)


@task(task_config=Paddle(workers=2))
def paddle_env() -> dict[str, str]:
    """Collective PaddleJob: every worker sees the rendezvous on worker 0; the value is worker
    0's (it resolves its own pod IP through the downward API)."""
    return _env("PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_JOB_ID", "TRAINOP_REPLICA_INDEX")


# --- serialised only (golden files) -----------------------------------------------------------
COMPAT_PYTORCH = PyTorch(
    workers=2,
    compat=True,
    worker=Replica(requests=Resources(cpu="1")),
    run_policy=RunPolicy(clean_pod_policy=CleanPodPolicy.ALL, backoff_limit=3),
)


@task(task_config=COMPAT_PYTORCH)
def rank_sum_compat(offset: int) -> int:
    return offset


@task(task_config=TensorFlow(workers=2, ps=1, chief=True, compat=True))
def tf_compat() -> str:
    return os.environ.get("TF_CONFIG", "")


@task(task_config=MXNet(workers=2, servers=1))
def mxnet_function() -> str:
    return os.environ.get("DMLC_ROLE", "")


@task(
    task_config=XGBoost(workers=1),
    pod_template=PodTemplate(primary_container_name="trainer", labels={"team": "ml"}),
    timeout=timedelta(minutes=5),
)
def with_pod_template() -> str:
    return "ok"


@task(task_config=TensorFlow(workers=2))
def tf_worker_zero() -> str:
    """No chief: worker 0 is the primary, and only its index tells it apart from worker 1."""
    return os.environ.get("TF_CONFIG", "")


@task(task_config=TrainJob(runtime="torch-distributed", num_nodes=2, env={"STEPS": "3"}))
def trainjob_ddp(lr: float) -> dict[str, float]:
    """DDP (gloo) over the TrainJob's 2 nodes under torchrun: each rank trains on its own data,
    DDP averages the gradients, so every rank ends with the same weights; rank 0 reports them."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights everywhere
    model = DistributedDataParallel(torch.nn.Linear(1, 1, bias=False))
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(int(os.environ["STEPS"])):
        optimiser.zero_grad()
        x = torch.full((4, 1), float(rank + 1))  # rank-specific data
        model(x).pow(2).mean().backward()
        optimiser.step()
    weight = model.module.weight.detach().clone()
    gathered = [torch.zeros_like(weight) for _ in range(world)]
    dist.all_gather(gathered, weight)
    dist.destroy_process_group()
    spread = max(float((g - weight).abs().max()) for g in gathered)
    return {"world": float(world), "rank": float(rank), "weight": float(weight.item()),
            "spread": spread, "nnodes": float(os.environ["PET_NNODES"])}  # fmt: skip
