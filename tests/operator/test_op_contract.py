"""The planner contract, for every kind, through the real operator and the real kube-apiserver.

One namespace of the session's control plane and one operator serve the whole module (jobs have
distinct names); the kubelet stand-in runs the pods, with per-job rules; kube-controller-manager's
garbage collector removes what a deleted job owned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from builders import JobBuilder, make_job
from k8s import namespace_name
from opkit import Cluster, RunningOperator, open_cluster, wait_for

from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import build_registry
from trainop_core.testing.controlplane import ControlPlane

# kind -> (replica types and counts, an env var its contract injects)
SHAPES: dict[str, tuple[dict[str, int], str]] = {
    "TFJob": ({"Worker": 2}, "TF_CONFIG"),
    "PyTorchJob": ({"Master": 1, "Worker": 1}, "MASTER_ADDR"),
    "MXJob": ({"Scheduler": 1, "Server": 1, "Worker": 1}, "DMLC_ROLE"),
    "XGBoostJob": ({"Master": 1, "Worker": 1}, "MASTER_ADDR"),
    "JAXJob": ({"Worker": 2}, "COORDINATOR_ADDRESS"),
    "PaddleJob": ({"Master": 1, "Worker": 1}, "PADDLE_MASTER"),
}  # MPIJob's launcher pattern has a suite of its own (test_op_mpi.py)
KINDS = {k.kind: k for k in build_registry(entry_points=False)}
kind_names = pytest.mark.parametrize("kind_name", list(SHAPES), ids=[f"a {k}" for k in SHAPES])


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    registry = build_registry(entry_points=False)
    tmp = tmp_path_factory.mktemp("contract")
    with open_cluster(control_plane, namespace_name("contract"), registry, tmp) as cluster:
        op = RunningOperator(cluster, controller_threads=2).wait_started()
        yield cluster
        op.stop()


def job_of(kind_name: str, name: str, restart_policy: str | None = None) -> JobBuilder:
    kind = KINDS[kind_name]
    builder = make_job(
        kind.kind, name, replica_field=kind.replica_field, container=kind.default_container
    )
    for rtype, count in SHAPES[kind_name][0].items():
        builder.replica(rtype, count, restart_policy=restart_policy, command=["train"])
    return builder


def expected_names(kind_name: str, job: str) -> list[str]:
    return sorted(
        f"{job}-{rtype.lower()}-{i}" for rtype, n in SHAPES[kind_name][0].items() for i in range(n)
    )


def running(env: Cluster, job: str, names: list[str]) -> bool:
    """Exactly these pods exist and all run (one listing: `all()` of an empty list is True)."""
    pods = env.pods(job)
    return [p.metadata.name for p in pods] == names and all(
        p.status.phase == "Running" for p in pods
    )


def default_container(pod: Any, kind: Kind) -> Any:
    return next(c for c in pod.spec.containers if c.name == kind.default_container)


@kind_names
def test_a_job_gets_its_pods_and_services_and_succeeds(env: Cluster, kind_name: str) -> None:
    kind, name = KINDS[kind_name], f"ok-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=0.3)
    job = env.create_job(job_of(kind_name, name).build())
    pods = wait_for(
        lambda: len(p := env.pods(name)) == len(expected_names(kind_name, name)) and p,
        what="all pods",
    )
    assert [p.metadata.name for p in pods] == expected_names(kind_name, name)
    for pod in pods:
        labels = pod.metadata.labels
        assert labels["training.kubeflow.org/job-name"] == name
        assert labels["training.kubeflow.org/operator-name"] == kind.controller_name
        rtype, index = pod.metadata.name[len(name) + 1 :].rsplit("-", 1)
        assert labels["training.kubeflow.org/replica-type"] == rtype
        assert labels["training.kubeflow.org/replica-index"] == index
        (ref,) = pod.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == (
            kind.kind,
            name,
            job["metadata"]["uid"],
            True,
        )
        env_names = {e.name for e in default_container(pod, kind).env or []}
        assert SHAPES[kind_name][1] in env_names
    wanted = expected_names(kind_name, name)
    wait_for(lambda: [s.metadata.name for s in env.services(name)] == wanted, what="services")
    conditions = env.wait_condition(kind_name, name, "Succeeded")
    assert conditions["Created"] == "True"
    assert "Failed" not in conditions
    assert max(env.pod_adds[n] for n in expected_names(kind_name, name)) == 1


@kind_names
def test_a_failing_replica_with_restart_policy_never_fails_the_job(
    env: Cluster, kind_name: str
) -> None:
    name = f"never-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=0.2, exit_code=1)
    env.create_job(job_of(kind_name, name, restart_policy="Never").build())
    conditions = env.wait_condition(kind_name, name, "Failed")
    assert conditions.get("Succeeded") != "True"
    wait_for(
        lambda: f"{kind_name}Failed" in {e.reason for e in env.events(name)},
        what="the Failed event",
    )


@kind_names
def test_on_failure_restarts_containers_in_place_then_succeeds(
    env: Cluster, kind_name: str
) -> None:
    name = f"onfail-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=0.2, exit_code=[1, 0])
    env.create_job(job_of(kind_name, name, restart_policy="OnFailure").build())
    env.wait_condition(kind_name, name, "Succeeded")
    pods = env.pods(name)
    assert all(p.spec.restart_policy == "OnFailure" for p in pods)
    assert sum(cs.restart_count for p in pods for cs in p.status.container_statuses) >= 1
    assert all(env.pod_adds[p.metadata.name] == 1 for p in pods)  # in place


@kind_names
def test_exit_code_policy_recreates_a_pod_killed_by_a_signal(env: Cluster, kind_name: str) -> None:
    name = f"exitcode-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=None)
    env.create_job(job_of(kind_name, name, restart_policy="ExitCode").build())
    names = expected_names(kind_name, name)
    wait_for(lambda: running(env, name, names), what="pods running")
    victim = names[0]
    env.terminate(victim, exit_code=137)
    wait_for(lambda: env.pod_adds[victim] == 2, what="victim re-created")
    assert env.conditions(kind_name, name).get("Failed") != "True"
    wait_for(lambda: running(env, name, names), what="running")
    for pod in names:
        env.terminate(pod, exit_code=0)
    env.wait_condition(kind_name, name, "Succeeded")


@kind_names
def test_a_suspended_job_has_no_pods_until_resumed(env: Cluster, kind_name: str) -> None:
    name = f"suspend-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=0.2)
    env.create_job(job_of(kind_name, name).run_policy(suspend=True).build())
    env.wait_condition(kind_name, name, "Suspended")
    assert env.pods(name) == []
    env.patch_job(kind_name, name, {"spec": {"runPolicy": {"suspend": False}}})
    env.wait_condition(kind_name, name, "Succeeded")
    assert len(env.pods(name)) == len(expected_names(kind_name, name))


@kind_names
def test_deleting_a_job_garbage_collects_its_pods_and_services(
    env: Cluster, kind_name: str
) -> None:
    name = f"delete-{kind_name.lower()}"
    env.rule(f"{name}-*", run_seconds=None)
    env.create_job(job_of(kind_name, name).build())
    wait_for(
        lambda: len(env.services(name)) == len(expected_names(kind_name, name)), what="services"
    )
    env.delete_job(kind_name, name)
    wait_for(lambda: not env.pods(name) and not env.services(name), what="children collected")
    assert not [p for p in env.pods(name)]
