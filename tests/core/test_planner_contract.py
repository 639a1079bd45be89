"""The planner contract: the same behaviours, checked plan-in/plan-out, for every kind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.core._kind_builders import (
    ALL_KINDS,
    FOLLOWER,
    LEADERS,
    T0,
    Sim,
    job,
    kind_of,
    with_restart_policy,
)
from trainop_core.api.types import MANAGED_BY_MULTIKUEUE, MANAGED_BY_OPERATOR
from trainop_core.planner import RESTARTS_ANNOTATION
from trainop_core.planner.pods import JOB_NAME, OPERATOR_NAME, REPLICA_INDEX, REPLICA_TYPE

each_kind = pytest.mark.parametrize("kind", ALL_KINDS, ids=[f"a {k}" for k in ALL_KINDS])


def running(kind: str, **run_policy: Any) -> Sim:
    """A job whose pods have all been created and are Running."""
    sim = Sim(job(kind, **run_policy))
    sim.step()
    sim.set_all("Running")
    sim.step()
    return sim


def reasons(sim: Sim) -> list[str]:
    return [e.reason for e in sim.last.events]


# --- create ---------------------------------------------------------------------------------


@each_kind
def test_first_plan_creates_every_replica_pod_and_service(kind: str) -> None:
    sim = Sim(job(kind))
    first = sim.step()
    expected = {
        f"demo-{rt.lower()}-{i}"
        for rt, spec in sim.job.spec.replica_specs.items()
        for i in range(spec.replicas or 0)
    }
    assert {p["metadata"]["name"] for p in first.create_pods} == expected
    assert {s["metadata"]["name"] for s in first.create_services} == expected
    pod = first.create_pods[0]
    labels = pod["metadata"]["labels"]
    assert labels[JOB_NAME] == "demo"
    assert labels[OPERATOR_NAME] == f"{kind.lower()}-controller"
    assert labels[REPLICA_TYPE] == labels[REPLICA_TYPE].lower()
    assert pod["metadata"]["ownerReferences"][0]["kind"] == kind
    assert first.status is not None
    created = first.status.conditions[0]
    assert (created.type.value, created.reason) == ("Created", f"{kind}Created")
    assert created.message == f"{kind} demo is created."
    assert first.status.start_time == T0
    assert "created" in first.metrics


@each_kind
def test_services_are_headless_and_select_exactly_their_pod(kind: str) -> None:
    first = Sim(job(kind)).step()
    for svc in first.create_services:
        assert svc["spec"]["clusterIP"] == "None"
        selector = svc["spec"]["selector"]
        assert selector[REPLICA_INDEX] == svc["metadata"]["name"].rsplit("-", 1)[1]
        port = kind_of(kind).default_port
        assert {"name": kind_of(kind).port_name, "port": port} in svc["spec"]["ports"]


@each_kind
def test_an_unchanged_world_plans_nothing_and_writes_no_status(kind: str) -> None:
    sim = running(kind)
    again = sim.step()
    assert again.create_pods == []
    assert again.delete_pods == []
    assert again.status is None


# --- run and succeed ------------------------------------------------------------------------


@each_kind
def test_running_leader_pods_make_the_job_running(kind: str) -> None:
    sim = running(kind)
    assert sim.conditions()["Running"] == "True"
    assert sim.last_condition() == "Running"


@each_kind
def test_the_kinds_success_rule_ends_the_job(kind: str) -> None:
    sim = running(kind)
    for rtype, index in LEADERS[kind]:
        sim.set(rtype, index, "Succeeded", exit_code=0)
    done = sim.step(5)
    assert sim.conditions()["Succeeded"] == "True"
    assert sim.conditions()["Running"] == "False"
    assert sim.job.status is not None and sim.job.status.completion_time == sim.now
    assert f"{kind}Succeeded" in reasons(sim)
    assert "successful" in done.metrics
    assert done.create_pods == []


@each_kind
def test_success_moves_remaining_active_counts_to_succeeded(kind: str) -> None:
    sim = running(kind)
    for rtype, index in LEADERS[kind]:
        sim.set(rtype, index, "Succeeded", exit_code=0)
    sim.step()
    assert sim.job.status is not None
    statuses = sim.job.status.replica_statuses.values()
    assert all(not rs.active for rs in statuses)
    assert sum(rs.succeeded or 0 for rs in statuses) == len(sim.pods)


# --- failures and restarts ------------------------------------------------------------------


@each_kind
def test_a_failed_pod_with_restart_policy_never_fails_the_job(kind: str) -> None:
    sim = Sim(with_restart_policy(job(kind), "Never"))
    sim.step()
    sim.set_all("Running")
    sim.step()
    sim.set(*FOLLOWER[kind], "Failed", exit_code=1)
    failed = sim.step()
    assert sim.last_condition() == "Failed"
    assert "failed" in failed.metrics
    assert failed.delete_pods == []  # cleanPodPolicy defaults to None
    assert sim.job.status is not None and sim.job.status.completion_time == sim.now


# Upstream's status rules: MXNet and XGBoost only restart for ExitCode; any other failed
# replica fails the job even though the pod itself is re-created (reference §2.3, §2.6).
ON_FAILURE_OUTCOME = {
    "TFJob": "Restarting",
    "PyTorchJob": "Restarting",
    "MXJob": "Failed",
    "XGBoostJob": "Failed",
    "JAXJob": "Restarting",
    "PaddleJob": "Restarting",
}


@each_kind
def test_an_evicted_pod_with_on_failure_is_deleted_to_be_recreated(kind: str) -> None:
    sim = Sim(with_restart_policy(job(kind), "OnFailure"))
    sim.step()
    sim.set_all("Running")
    sim.step()
    rtype, index = FOLLOWER[kind]
    sim.set(rtype, index, "Failed", reason="Evicted")
    restart = sim.step()
    assert restart.delete_pods == [f"demo-{rtype.lower()}-{index}"]
    assert restart.restarts == 1
    assert restart.job_annotations == {RESTARTS_ANNOTATION: "1"}
    assert ("Warning", f"{kind}Restarting") in [(e.type, e.reason) for e in restart.events]
    assert sim.last_condition() == ON_FAILURE_OUTCOME[kind]
    if ON_FAILURE_OUTCOME[kind] == "Restarting":
        again = sim.step()
        assert [p["metadata"]["name"] for p in again.create_pods] == restart.delete_pods


@each_kind
@pytest.mark.parametrize(
    ("code", "restarts"),
    [(137, True), (128, True), (None, True), (1, False), (127, False)],
    ids=[
        "exit 137 (killed) is retried",
        "exit 128 is retried",
        "no exit code (evicted) is retried",
        "exit 1 is permanent",
        "exit 127 is permanent",
    ],
)
def test_exit_code_policy_retries_only_retryable_codes(
    kind: str, code: int | None, restarts: bool
) -> None:
    sim = Sim(with_restart_policy(job(kind), "ExitCode"))
    first = sim.step()
    assert {p["spec"]["restartPolicy"] for p in first.create_pods} == {"Never"}
    sim.set_all("Running")
    sim.step()
    sim.set(*FOLLOWER[kind], "Failed", exit_code=code)
    after = sim.step()
    assert bool(after.delete_pods) is restarts
    assert sim.last_condition() == ("Restarting" if restarts else "Failed")
    if not restarts:
        assert sim.job.status is not None
        assert sim.job.status.conditions[-1].reason == f"{kind}Failed"


@each_kind
def test_exit_code_recreations_count_against_the_backoff_limit(kind: str) -> None:
    sim = Sim(with_restart_policy(job(kind, backoffLimit=2), "ExitCode"))
    sim.step()
    sim.set_all("Running")
    sim.step()
    rtype, index = FOLLOWER[kind]
    sim.set(rtype, index, "Failed", exit_code=137)
    assert sim.step().restarts == 1
    sim.step()  # re-created
    sim.set(rtype, index, "Failed", exit_code=137)
    final = sim.step()
    assert sim.last_condition() == "Failed"
    assert sim.job.status is not None
    message = sim.job.status.conditions[-1].message
    assert message == "Job demo has failed because it has reached the specified backoff limit"
    assert sorted(final.delete_pods) == sorted(final.delete_services)
    assert len(final.delete_pods) == sum(
        s.replicas or 0 for s in job(kind).spec.replica_specs.values()
    )


@each_kind
def test_in_place_container_restarts_count_against_the_backoff_limit(kind: str) -> None:
    sim = Sim(with_restart_policy(job(kind, backoffLimit=3), "OnFailure"))
    sim.step()
    sim.set_all("Running")
    sim.set(*FOLLOWER[kind], "Running", restart_count=2)
    sim.step()
    assert sim.conditions().get("Failed") is None
    sim.set(*FOLLOWER[kind], "Running", restart_count=3)
    sim.step()
    assert sim.last_condition() == "Failed"
    assert sim.pods == {}


@each_kind
def test_active_deadline_requeues_for_the_remaining_time_then_fails(kind: str) -> None:
    sim = running(kind, activeDeadlineSeconds=60)
    assert sim.last.requeue_after == pytest.approx(60)
    assert sim.step(45).requeue_after == pytest.approx(15)
    ended = sim.step(15)
    assert sim.last_condition() == "Failed"
    assert sim.job.status is not None
    assert sim.job.status.conditions[-1].message == (
        "Job demo has failed because it was active longer than specified deadline"
    )
    assert len(ended.delete_pods) == sum(
        s.replicas or 0 for s in job(kind).spec.replica_specs.values()
    )
    assert sim.pods == {} and sim.services == {}


# --- clean-up and TTL -----------------------------------------------------------------------


@each_kind
@pytest.mark.parametrize(
    ("policy", "deleted"),
    [("None", "nothing"), ("Running", "running"), ("All", "all")],
    ids=[
        "cleanPodPolicy None keeps every pod",
        "cleanPodPolicy Running deletes only running pods",
        "cleanPodPolicy All deletes every pod",
    ],
)
def test_clean_pod_policy_applies_once_the_job_succeeded(
    kind: str, policy: str, deleted: str
) -> None:
    sim = running(kind, cleanPodPolicy=policy)
    for rtype, index in LEADERS[kind]:
        sim.set(rtype, index, "Succeeded", exit_code=0)
    still_running = {n for n, p in sim.pods.items() if p.phase == "Running"}
    every = set(sim.pods)
    plan = sim.step()
    expected = {"nothing": set(), "running": still_running, "all": every}[deleted]
    assert set(plan.delete_pods) == expected
    assert set(plan.delete_services) == expected


@each_kind
def test_ttl_deletes_the_finished_job_when_due_and_requeues_until_then(kind: str) -> None:
    sim = running(kind, ttlSecondsAfterFinished=100)
    for rtype, index in LEADERS[kind]:
        sim.set(rtype, index, "Succeeded", exit_code=0)
    done = sim.step()
    assert done.requeue_after == pytest.approx(100)
    assert sim.step(30).requeue_after == pytest.approx(70)
    due = sim.step(70)
    assert due.delete_job and "deleted" in due.metrics


# --- suspend / resume -----------------------------------------------------------------------


@each_kind
def test_suspending_deletes_everything_and_resuming_restarts_the_clock(kind: str) -> None:
    sim = running(kind, activeDeadlineSeconds=600)
    sim.change(suspend=True)
    paused = sim.step(100)
    assert sim.pods == {} and sim.services == {}
    assert paused.requeue_after is None  # no deadline while suspended
    assert sim.conditions()["Suspended"] == "True"
    assert sim.conditions()["Running"] == "False"
    assert sim.job.status is not None
    assert all(not rs.active for rs in sim.job.status.replica_statuses.values())
    assert (f"{kind}Suspended") in reasons(sim)
    sim.change(suspend=False)
    resumed = sim.step(1000)
    assert sim.conditions()["Suspended"] == "False"
    assert sim.job.status is not None
    suspended = [c for c in sim.job.status.conditions if c.type.value == "Suspended"]
    assert suspended[0].reason == f"{kind}Resumed"
    assert sim.job.status.start_time == sim.now
    assert resumed.create_pods and resumed.requeue_after == pytest.approx(600)
    assert sim.conditions().get("Failed") is None


@each_kind
def test_a_job_created_suspended_creates_no_pods(kind: str) -> None:
    sim = Sim(job(kind, suspend=True))
    first = sim.step()
    assert first.create_pods == []
    assert sim.conditions() == {"Created": "True", "Suspended": "True"}


# --- managedBy, scale -----------------------------------------------------------------------


@each_kind
@pytest.mark.parametrize(
    ("managed_by", "skipped"),
    [(MANAGED_BY_MULTIKUEUE, True), (MANAGED_BY_OPERATOR, False)],
    ids=["a job managed by MultiKueue is left alone", "a job managed by us is planned"],
)
def test_managed_by_decides_whether_we_plan(kind: str, managed_by: str, skipped: bool) -> None:
    first = Sim(job(kind, managedBy=managed_by)).step()
    assert first.is_empty is skipped


@each_kind
def test_scaling_workers_down_deletes_the_highest_indices(kind: str) -> None:
    sim = running(kind)
    data = sim.job.to_dict()
    field = kind_of(kind).replica_field
    data["spec"][field]["Worker"]["replicas"] = 1
    sim.job = type(sim.job).model_validate(data)
    shrink = sim.step()
    assert shrink.delete_pods == ["demo-worker-1"]
    assert shrink.delete_services == ["demo-worker-1"]
    assert shrink.create_pods == []


@each_kind
def test_a_running_pod_being_deleted_counts_as_failed_not_active(kind: str) -> None:
    sim = running(kind)
    rtype, index = FOLLOWER[kind]
    sim.set(rtype, index, "Running", deleting=True)
    sim.step()
    assert sim.job.status is not None
    worker = sim.job.status.replica_statuses["Worker"]
    assert (worker.active, worker.failed) == (1, 1)


def test_deadline_is_measured_from_the_start_time_not_from_now() -> None:
    sim = running("PyTorchJob", activeDeadlineSeconds=60)
    assert sim.job.status is not None and sim.job.status.start_time == T0
    assert sim.step(59).requeue_after == pytest.approx(1)
    assert sim.now - T0 == timedelta(seconds=59)
