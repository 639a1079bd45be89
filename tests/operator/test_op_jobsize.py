"""One job's replicas are bounded on the operator (`--max-replicas-per-job`): the webhook denies a
larger job naming the count to lower, and without the webhook the reconciler fails it before
planning anything, so a job of 2**31 - 1 replicas (which the API server accepts) costs neither
memory nor pods. Hostile counts are checked by reading the counts only: the tests below would
not finish if any of it went replica by replica."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from builders import make_job, minimal_job
from opkit import Cluster, RunningOperator, wait_for

from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB
from trainop_core.operator.options import options_from_args
from trainop_core.operator.webhook.review import validate, validate_v2
from trainop_core.runtimes.catalog import default_catalog

Start = Callable[..., RunningOperator]
INT32_MAX = 2**31 - 1


def review(job: dict[str, Any], group: str = "kubeflow.org") -> dict[str, Any]:
    version = "v1alpha1" if group.startswith("trainer") else "v1"
    return {
        "uid": "u-1",
        "kind": {"group": group, "version": version, "kind": job["kind"]},
        "operation": "CREATE",
        "namespace": "team",
        "object": job,
    }


def causes(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in answer["status"]["details"]["causes"]]


def trainjob(runtime: str, **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }


# --- the webhook ---------------------------------------------------------------------------------
BIG_V1 = [
    (
        make_job("PyTorchJob", "big").master().workers(INT32_MAX),
        "spec.pytorchReplicaSpecs.Worker.replicas",
        INT32_MAX + 1,
    ),
    (
        make_job("TFJob", "big").workers(INT32_MAX).ps(INT32_MAX).evaluator(1),
        "spec.tfReplicaSpecs.PS.replicas",
        2 * INT32_MAX + 1,
    ),
    (
        make_job("TFJob", "big").workers(7).ps(INT32_MAX),
        "spec.tfReplicaSpecs.PS.replicas",
        INT32_MAX + 7,
    ),
]


@pytest.mark.parametrize(
    ("job", "field", "total"),
    BIG_V1,
    ids=[
        "a PyTorchJob of 2^31 replicas is refused at its Worker count",
        "a TFJob of 2^31-1 workers and 2^31-1 PS is refused at the count the kind lists first",
        "a TFJob is refused at the count of its largest type",
    ],
)
def test_the_webhook_refuses_a_job_above_the_bound_naming_its_largest_count(
    registry: KindRegistry, job: Any, field: str, total: int
) -> None:
    answer = validate(review(job.build()), registry)["response"]
    assert answer["allowed"] is False
    assert causes(answer) == [
        (
            field,
            f"the job has {total} replicas in all; this operator runs at most "
            f"{MAX_REPLICAS_PER_JOB} replicas of one job (--max-replicas-per-job)",
        )
    ]


def test_the_bound_is_the_operators_option_and_is_inclusive(registry: KindRegistry) -> None:
    job = make_job("PyTorchJob", "j").master().workers(3).build()  # 4 replicas
    assert validate(review(job), registry, max_replicas=4)["response"]["allowed"] is True
    answer = validate(review(job), registry, max_replicas=3)["response"]
    [(field, message)] = causes(answer)
    assert field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert "at most 3 replicas of one job" in message


@pytest.mark.parametrize(
    ("runtime", "nodes"),
    [("torch-distributed", INT32_MAX), ("mpi-distributed", INT32_MAX), ("jax-distributed", 10_001)],
)
def test_the_webhook_refuses_a_large_trainjob_naming_num_nodes(
    registry: KindRegistry, runtime: str, nodes: int
) -> None:
    job = trainjob(runtime, numNodes=nodes)
    for runtimes in (default_catalog(), None):  # the runtime known to the caches, or not yet
        answer = validate_v2(review(job, "trainer.kubeflow.org"), registry, runtimes)["response"]
        assert answer["allowed"] is False
        [(field, message)] = causes(answer)
        assert field == "spec.trainer.numNodes", message
        assert "replicaSpecs" not in message and "(--max-replicas-per-job)" in message
    assert validate_v2(review(trainjob(runtime, numNodes=2)), registry, default_catalog())[
        "response"
    ]["allowed"]


def test_a_trainjob_too_large_by_its_runtimes_node_count_names_the_runtime(
    registry: KindRegistry,
) -> None:
    catalog = default_catalog()
    (runtime,) = [r for r in catalog.runtimes if r.name == "torch-distributed"]
    assert runtime.spec.ml_policy is not None
    runtime.spec.ml_policy.num_nodes = 20_000
    answer = validate_v2(review(trainjob("torch-distributed")), registry, catalog)["response"]
    [(field, message)] = causes(answer)
    assert field == "spec.runtimeRef.name"
    assert message.startswith("ClusterTrainingRuntime/torch-distributed spec.mlPolicy.numNodes: ")
    assert "the job has 20000 replicas in all" in message


@pytest.mark.parametrize("value", ["0", "-1", str(2**31)], ids=lambda v: f"{v} is refused")
def test_the_flag_must_be_a_positive_int32(value: str) -> None:
    import argparse

    from trainop_core.operator.options import add_flags

    parser = argparse.ArgumentParser()
    add_flags(parser)
    assert options_from_args(parser.parse_args([])).max_replicas_per_job == 10_000
    assert (
        options_from_args(parser.parse_args(["--max-replicas-per-job=7"])).max_replicas_per_job == 7
    )
    with pytest.raises(ValueError, match="--max-replicas-per-job"):
        options_from_args(parser.parse_args([f"--max-replicas-per-job={value}"]))


# --- the reconciler, on the real kube-apiserver (no webhook) ------------------------------------
def test_a_job_above_the_bound_is_failed_once_without_a_pod_and_not_retried(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator().wait_started()
    job = make_job("TFJob", "huge").workers(INT32_MAX).ps(INT32_MAX).build()
    cluster.create_job(job)
    cluster.wait_condition("TFJob", "huge", "Failed")
    status = cluster.get_job("TFJob", "huge")["status"]
    (failed,) = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "TFJobFailedValidation"
    assert failed["message"] == (
        "spec.tfReplicaSpecs.PS.replicas: the job has 4294967294 replicas in all; this "
        f"operator runs at most {MAX_REPLICAS_PER_JOB} replicas of one job "
        "(--max-replicas-per-job)"
    )
    wait_for(
        lambda: any(
            e.reason == "TFJobFailedValidation" and "--max-replicas-per-job" in e.message
            for e in cluster.events("huge")
        ),
        what="a warning event naming the bound",
    )
    assert cluster.pods("huge") == [] and cluster.services("huge") == []
    assert not [name for name in cluster.pod_adds if name.startswith("huge-")]
    assert op.manager.controllers["TFJob"].queue.num_requeues(f"{cluster.namespace}/huge") == 0


def test_the_reconcilers_bound_follows_the_option(cluster: Cluster, run_operator: Start) -> None:
    cluster.rule("*", run_seconds=0.2)
    run_operator(max_replicas_per_job=2).wait_started()
    cluster.create_job(minimal_job("PyTorchJob", "fits").build())  # master + 1 worker
    cluster.create_job(make_job("PyTorchJob", "over").master().workers(2).build())
    cluster.wait_condition("PyTorchJob", "fits", "Succeeded")
    cluster.wait_condition("PyTorchJob", "over", "Failed")
    job = cluster.get_job("PyTorchJob", "over")
    (condition,) = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert condition["message"].startswith("spec.pytorchReplicaSpecs.Worker.replicas: the job")
    assert cluster.pods("over") == []
