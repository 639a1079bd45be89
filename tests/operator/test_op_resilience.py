"""Faults, lost connections and crashes: the operator converges, loses no job, never duplicates."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from builders import minimal_job
from opkit import Cluster, RunningOperator, operator_process, wait_for

Start = Callable[..., RunningOperator]


def run_jobs(cluster: Cluster, count: int, prefix: str = "job") -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        cluster.create_job(minimal_job("PyTorchJob", name).workers(2).build())
    return names


def assert_no_pod_created_twice(cluster: Cluster) -> None:
    twice = {name: n for name, n in cluster.pod_adds.items() if n > 1}
    assert twice == {}


@pytest.mark.parametrize(
    ("verb", "resource", "code"),
    [
        ("update", "pytorchjobs/status", 409),
        ("create", "pods", 500),
        ("create", "services", 429),
        ("list", "pods", 500),
        ("watch", "pods", 500),
        ("delete", "pods", 500),
    ],
    ids=lambda v: str(v),
)
def test_injected_api_errors_still_converge(
    cluster: Cluster, run_operator: Start, verb: str, resource: str, code: int
) -> None:
    cluster.server.faults.fail(verb, resource, code=code, count=2)
    cluster.rule("*", run_seconds=0.2)
    run_operator()
    names = run_jobs(cluster, 2)
    for name in names:
        cluster.wait_condition("PyTorchJob", name, "Succeeded", timeout=20)
    assert_no_pod_created_twice(cluster)


def test_conflicting_status_writes_are_re_read_and_re_planned(
    cluster: Cluster, run_operator: Start
) -> None:
    cluster.rule("*", run_seconds=0.2)
    op = run_operator().wait_started()
    cluster.server.faults.fail("update", "pytorchjobs/status", code=409, count=5)
    (name,) = run_jobs(cluster, 1)
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    requeues = op.manager.metrics.reconcile_total.value(
        controller="pytorchjob-controller", result="requeue"
    )
    assert requeues >= 1


def test_cut_watches_resume_and_converge(cluster: Cluster, run_operator: Start) -> None:
    cluster.server.faults.cut_watch("pods", after_events=1, count=4)
    cluster.server.faults.cut_watch("pytorchjobs", after_events=1, count=2)
    cluster.rule("*", run_seconds=0.2)
    run_operator()
    for name in run_jobs(cluster, 3):
        cluster.wait_condition("PyTorchJob", name, "Succeeded", timeout=20)
    assert_no_pod_created_twice(cluster)


def test_410_gone_forces_a_relist_and_converges(cluster: Cluster, run_operator: Start) -> None:
    op = run_operator().wait_started()
    pods = op.manager.informers["pods"]
    lists_before = pods.lists
    cluster.rule("*", run_seconds=None)
    (name,) = run_jobs(cluster, 1)
    wait_for(lambda: len(pods.list()) == 3, what="pods cached")
    cluster.server.faults.fail("watch", "pods", code=500, count=1)  # stay away a moment
    cluster.server.faults.cut_open_watches("pods")
    for pod in cluster.pods(name):  # changes the informer has not seen when it reconnects
        cluster.kubelet.terminate("default", pod.metadata.name, exit_code=0)
    cluster.server.faults.expire_history()
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert pods.lists > lists_before
    assert_no_pod_created_twice(cluster)


def test_half_open_watch_is_abandoned_after_the_read_timeout(
    cluster: Cluster, run_operator: Start
) -> None:
    """A watch that stays open but delivers nothing past its own server-side timeout (a
    half-open connection) is given up timeoutSeconds + the read margin later, and re-opened."""
    cluster.server.faults.delay("watch", "pods", seconds=30, count=None)  # answers nothing
    op = run_operator(watch_timeout=1, watch_read_timeout=1.0).wait_started()
    before = cluster.server.stats.requests[("watch", "pods")]
    wait_for(
        lambda: cluster.server.stats.requests[("watch", "pods")] >= before + 3,
        timeout=15,
        what="watches re-opened",
    )
    assert op.manager.caches_synced()


def test_sigkill_and_restart_mid_run_loses_no_job_and_duplicates_no_pod(
    cluster: Cluster,
) -> None:
    cluster.rule("*", run_seconds=None)
    cluster.server.faults.delay("create", "pods", seconds=0.15, count=None)
    names = run_jobs(cluster, 4)
    first = operator_process(cluster)
    try:
        wait_for(lambda: sum(cluster.pod_adds.values()) >= 3, timeout=20, what="some pods")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert sum(cluster.pod_adds.values()) < 12, "killed too late to test anything"
        second = operator_process(cluster)
        try:
            wait_for(lambda: len(cluster.pod_adds) == 12, timeout=30, what="all 12 pods")
            for pod in list(cluster.pod_adds):
                wait_for(
                    lambda p=pod: (
                        cluster.core.read_namespaced_pod(  # type: ignore[misc]
                            p.split("/")[1], "default"
                        ).status.phase
                        == "Running"
                    ),
                    what="running",
                )
                cluster.kubelet.terminate("default", pod.split("/")[1], exit_code=0)
            for name in names:
                cluster.wait_condition("PyTorchJob", name, "Succeeded", timeout=20)
            assert_no_pod_created_twice(cluster)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(10) == 0
    finally:
        if first.poll() is None:
            first.kill()


def test_expectations_hold_back_creations_while_the_pod_cache_lags(
    cluster: Cluster, run_operator: Start
) -> None:
    """With the pod watch down, job events still trigger reconciles; none re-creates a pod."""
    op = run_operator().wait_started()
    cluster.server.faults.fail("watch", "pods", code=500, count=2)  # ~1.5 s of stale pod cache
    cluster.server.faults.cut_open_watches("pods")
    cluster.rule("*", run_seconds=0.2)
    (name,) = run_jobs(cluster, 1)
    for i in range(3):  # job updates during the outage: each one is a reconcile
        cluster.patch_job("PyTorchJob", name, {"metadata": {"labels": {"poke": str(i)}}})
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert cluster.server.stats.requests[("create", "pods")] == 3  # no AlreadyExists retries
    total = op.manager.metrics.reconcile_time.count(controller="pytorchjob-controller")
    assert total >= 2  # reconciled during the outage, and held back each time


def test_a_lagging_job_cache_cannot_resurrect_the_pods_of_a_finished_job(
    cluster: Cluster, run_operator: Start
) -> None:
    """The operator plans from its own status write, not from an older cached job, even after
    several writes (worker done, then master done) while the job watch is down."""
    run_operator().wait_started()
    cluster.rule("*", run_seconds=None)
    name = "lag"
    cluster.create_job(minimal_job("PyTorchJob", name).run_policy(cleanPodPolicy="All").build())
    wait_for(
        lambda: (
            len(pods := cluster.pods(name)) == 2  # one listing: all() of [] is True
            and all(p.status.phase == "Running" for p in pods)
        ),
        what="running",
    )
    cluster.wait_condition("PyTorchJob", name, "Running")
    cluster.server.faults.fail("watch", "pytorchjobs", code=500, count=2)  # job cache goes stale
    cluster.server.faults.cut_open_watches("pytorchjobs")
    # The worker first: the master's exit ends the job, whose pods are then deleted.
    for pod in reversed(cluster.pods(name)):
        cluster.kubelet.terminate("default", pod.metadata.name, exit_code=0)
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    wait_for(lambda: not cluster.pods(name), what="pods cleaned up")
    wait_for(lambda: cluster.server.stats.open_watches >= 7, what="job watch back")
    assert_no_pod_created_twice(cluster)
    assert cluster.pods(name) == []
