"""PaddleJob, the sixth kind: one module (kinds/paddle.py) plus one line in the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, T0, defaulted
from trainop_core.api.load import load_job
from trainop_core.api.validation import validate_job
from trainop_core.backends.process.podspec import container_env, downward_api
from trainop_core.kinds import paddle
from trainop_core.planner import KubernetesAddressing, Observed, plan

PACKAGE = Path(paddle.__file__).resolve().parents[1]
KIND = REGISTRY.get("PaddleJob")


def test_nothing_outside_its_module_and_the_table_line_knows_about_paddle() -> None:
    mentions = [
        (str(path.relative_to(PACKAGE)), line.strip())
        for path in PACKAGE.rglob("*.py")
        if path != Path(paddle.__file__).resolve()
        for line in path.read_text().splitlines()
        if "paddle" in line.lower()
    ]
    assert [where for where, _ in mentions] == ["kinds/table.py", "kinds/table.py"]


def first_pods(b: Any) -> dict[str, dict[str, Any]]:
    job = load_job(b.build(), registry=REGISTRY)
    planned = plan(job, KIND, Observed(), T0, KubernetesAddressing(job, KIND))
    return {p["metadata"]["name"]: p for p in planned.create_pods}


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    entries = pod["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in entries}


def test_collective_mode_makes_worker_0_the_rendezvous_on_its_own_pod_ip() -> None:
    pods = first_pods(make_job("PaddleJob", "pd").workers(3))
    assert env_of(pods["pd-worker-0"]) == {
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "pd",
        "PADDLE_NNODES": "3",
        "POD_IP_DUMMY": {"fieldRef": {"fieldPath": "status.podIP"}},
        "PADDLE_MASTER": "$(POD_IP_DUMMY):36543",
    }
    assert env_of(pods["pd-worker-2"])["PADDLE_MASTER"] == "pd-worker-0:36543"
    assert "PADDLE_TRAINER_NUM" not in env_of(pods["pd-worker-2"])


def test_ps_mode_counts_one_server_or_trainer_per_pod_and_reads_the_master_port() -> None:
    b = make_job("PaddleJob", "pd").master().workers(2)
    b.container("Master", ports=[{"name": "master", "containerPort": 40000}])
    pods = first_pods(b)
    master, worker = env_of(pods["pd-master-0"]), env_of(pods["pd-worker-1"])
    assert (master["PADDLE_MASTER"], master["PADDLE_SERVER_NUM"]) == ("$(POD_IP_DUMMY):40000", "1")
    assert (worker["PADDLE_MASTER"], worker["PADDLE_TRAINER_NUM"]) == ("pd-master-0:40000", "1")
    assert "POD_IP_DUMMY" not in worker
    labels = pods["pd-master-0"]["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/job-role" not in pods["pd-worker-0"]["metadata"]["labels"]


def test_the_rank_0_address_resolves_from_the_downward_api_on_a_process_backend() -> None:
    pod = first_pods(make_job("PaddleJob", "pd").workers(2))["pd-worker-0"]
    env = container_env(pod["spec"]["containers"][0], downward_api(pod, "10.0.0.7"))
    assert env["PADDLE_MASTER"] == "10.0.0.7:36543"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, (3, 3)),
        ({"minReplicas": 2}, (2, 2)),
        ({"maxReplicas": 5}, (5, 5)),
        ({"minReplicas": 1, "maxReplicas": 4}, (1, 4)),
    ],
    ids=["no bounds follow the workers", "min copies to max", "max copies to min", "both kept"],
)
def test_elastic_policy_bounds_default_as_upstream(policy: dict[str, int], expected: Any) -> None:
    job = defaulted(load_job(make_job("PaddleJob").workers(3).spec(elasticPolicy=policy).build()))
    elastic = job.spec.elastic_policy  # type: ignore[attr-defined]  # PaddleJobSpec's own field
    assert (elastic.min_replicas, elastic.max_replicas) == expected


def test_defaults_are_upstream_s_port_restart_policy_and_clean_pod_policy() -> None:
    job = defaulted(load_job(make_job("PaddleJob").workers(1).build()))
    worker = job.spec.replica_specs["Worker"]
    assert worker.restart_policy.value == "OnFailure"  # type: ignore[union-attr]  # defaulted
    assert worker.template["spec"]["containers"][0]["ports"] == [
        {"name": "master", "containerPort": 36543}
    ]
    assert job.spec.run_policy.clean_pod_policy.value == "None"  # type: ignore[union-attr]


def test_validation_allows_only_master_and_worker_and_wants_a_paddle_container() -> None:
    b = make_job("PaddleJob").workers(1).replica("PS", 1).container("Worker", name="trainer")
    problems = {p.path: p.message for p in validate_job(defaulted(load_job(b.build())), KIND)}
    assert "unknown replica type" in problems["spec.paddleReplicaSpecs.PS"]
    containers = "spec.paddleReplicaSpecs.Worker.template.spec.containers"
    assert 'no container named "paddle"' in problems[containers]
