"""Local execution is real: every replica is its own process on the trainop local backend.

Plain calls and workflows run the job; the task's output is the primary replica's, and a failing
replica fails the task with the job's reason and that replica's log.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import flyte_tasks
import pytest
from trainop_flyte import TrainingJobFailed

from trainop_core.client import TrainingClient


def test_plain_call_returns_the_master_replicas_output_from_another_process() -> None:
    report = flyte_tasks.pytorch_env(tag="plain")

    assert report["tag"] == "plain"
    assert report["TRAINOP_REPLICA_TYPE"] == "Master"
    assert report["RANK"] == "0"
    assert report["WORLD_SIZE"] == "2"
    assert report["MASTER_ADDR"] and report["MASTER_PORT"].isdigit()
    assert int(report["pid"]) != os.getpid()


def test_workflow_runs_the_job_and_passes_inputs_through() -> None:
    report = flyte_tasks.pytorch_env_wf(tag="from-a-workflow")

    assert report["tag"] == "from-a-workflow"
    assert report["RANK"] == "0"


def test_a_failing_replica_fails_the_task_with_the_jobs_reason_and_its_log() -> None:
    with pytest.raises(TrainingJobFailed) as failure:
        flyte_tasks.worker_fails()

    message = str(failure.value)
    assert "PyTorchJob" in message and "failed" in message
    assert "last lines of worker-1" in message
    assert "worker two exploded" in message


@pytest.mark.parametrize(
    "task",
    [flyte_tasks.worker_fails_by_default, flyte_tasks.worker_fails_by_default_compat],
    ids=["a native task", "a compat-mode task"],
)
def test_a_failing_replica_fails_the_task_promptly_unless_a_restart_policy_is_set(
    task: Any,
) -> None:
    # Flyte owns retries: replicas default to restartPolicy Never, as in Flyte's own plugins
    started = time.monotonic()
    with pytest.raises(TrainingJobFailed) as failure:
        task()
    elapsed = time.monotonic() - started

    message = str(failure.value)
    found = re.search(r"job (\S+)/(\S+)\)", message)
    assert found is not None, message
    TrainingClient("local").delete(found[2], found[1])  # stop the master, still sleeping
    assert "1 Worker replica(s) failed" in message
    assert "worker two exploded" in message  # the failing replica's own reason
    assert elapsed < 45, f"the task took {elapsed:.0f} s to fail"


def test_each_tensorflow_replica_sees_its_own_tf_config() -> None:
    config = json.loads(flyte_tasks.tf_config())

    assert config["task"] == {"type": "chief", "index": 0}
    assert sorted(config["cluster"]) == ["chief", "worker"]
    assert len(config["cluster"]["worker"]) == 1


@pytest.mark.slow
def test_pytorch_gloo_all_reduce_sums_the_ranks_of_master_and_two_workers() -> None:
    assert flyte_tasks.rank_sum(offset=0) == 0 + 1 + 2
    assert flyte_tasks.rank_sum_wf(offset=100) == 103


@pytest.mark.slow
def test_a_trainjob_function_task_trains_with_ddp_on_two_nodes_under_torchrun() -> None:
    """The torch-distributed runtime's policy: torchrun on each node, from the PET_* contract."""
    import torch

    report = flyte_tasks.trainjob_ddp(lr=0.1)
    assert (report["world"], report["rank"], report["nnodes"]) == (2.0, 0.0, 2.0)
    assert report["spread"] == 0.0  # DDP kept both ranks' weights equal
    # What DDP computes: each step, the gradient averaged over both ranks' data.
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    initial = model.weight.item()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimiser.zero_grad()
        losses = [model(torch.full((4, 1), float(r + 1))).pow(2).mean() for r in range(2)]
        (sum(losses) / 2).backward()
        optimiser.step()
    assert report["weight"] == pytest.approx(model.weight.item())
    assert report["weight"] != pytest.approx(initial)


@pytest.mark.slow
def test_xgboost_trains_over_the_collective_of_master_and_workers() -> None:
    result = flyte_tasks.xgb_train(rounds=5)

    assert result["world_size"] == 3
    assert result["rows"] == 600
    assert result["accuracy"] > 0.8


@pytest.mark.slow
def test_tensorflow_multi_worker_mirrored_strategy_syncs_chief_and_worker() -> None:
    # num_replicas_in_sync * 100 + the cross-replica sum of 1.0 per replica
    assert flyte_tasks.tf_mwms() == 2 * 100 + 2


@pytest.mark.slow
def test_a_compat_mode_task_runs_locally_like_a_native_one() -> None:
    # serialised as Flyte's own `pytorch` type with a pod template; locally still a trainop job
    assert flyte_tasks.rank_sum_compat(offset=7) == 7


def test_worker_zero_is_the_primary_when_there_is_no_chief() -> None:
    # only the replica-index label (through the downward API) tells worker 0 from worker 1
    config = json.loads(flyte_tasks.tf_worker_zero())

    assert config["task"] == {"type": "worker", "index": 0}


@pytest.mark.slow
@pytest.mark.mxnet
def test_an_mxnet_function_task_returns_worker_0s_result_not_a_parameter_servers(
    mxnet_venv: Path,
) -> None:
    report = flyte_tasks.mxnet_ps_report(epochs=2)

    assert (report["role"], report["worker_id"]) == ("worker", "0")
    assert 0.5 < float(report["accuracy"]) <= 1.0  # worker 0 printed the example's metrics


@pytest.mark.slow
def test_an_mpi_task_runs_its_function_in_every_rank_and_returns_rank_0_s_value() -> None:
    report = flyte_tasks.mpi_allreduce(offset=10)

    assert report == {"sum": "13", "size": "2", "rank": "0", "replica": "Worker-0"}


@pytest.mark.slow
def test_a_trainjob_function_task_on_mpi_runs_in_every_rank_under_the_launchers_mpirun() -> None:
    """Not once per pod: the launcher's mpirun starts a rank on each node (rank 0 on node 0),
    whose value the task returns."""
    report = flyte_tasks.trainjob_mpi_allreduce(offset=10)

    assert report == {"sum": "13", "size": "2", "rank": "0", "replica": "Node-0"}


def test_a_paddle_task_runs_in_every_worker_with_the_rendezvous_on_worker_0() -> None:
    report = flyte_tasks.paddle_env()

    assert report["TRAINOP_REPLICA_INDEX"] == "0"
    assert (report["PADDLE_NNODES"], report["PADDLE_JOB_ID"] != "") == ("2", True)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", report["PADDLE_MASTER"])
