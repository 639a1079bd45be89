"""Faults, lost connections, conflicts and crashes against the real kube-apiserver: the operator
converges, loses no job, never creates a pod twice.

Faults are injected by the fault proxy between the operator and the server; 410 Gone comes from a
real etcd compaction on the second (compactable) control plane; conflicts are real 409s, from a
write that raced the operator's.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import minimal_job
from k8s import namespace_name
from opkit import Cluster, RunningOperator, open_cluster, operator_process, wait_for

from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.liveness import WATCH_READ_MARGIN, WATCH_TIMEOUT, dead_watch_bound
from trainop_core.testing.controlplane import ControlPlane

Start = Callable[..., RunningOperator]


def run_jobs(cluster: Cluster, count: int, prefix: str = "job", **run_policy: str) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        job = minimal_job("PyTorchJob", name).workers(2)
        cluster.create_job(job.run_policy(**run_policy).build() if run_policy else job.build())
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
    fault = cluster.proxy.fail(verb, resource, code=code, count=2)
    cluster.rule("*", run_seconds=0.2)
    run_operator()
    # The operator deletes the pods of a finished job under cleanPodPolicy All.
    names = run_jobs(cluster, 2, **({"cleanPodPolicy": "All"} if verb == "delete" else {}))
    for name in names:
        cluster.wait_condition("PyTorchJob", name, "Succeeded")
    if verb == "delete":
        wait_for(lambda: not any(cluster.pods(n) for n in names), what="pods cleaned up")
    assert fault.applied == 2, "the fault never happened: the test proved nothing"
    assert_no_pod_created_twice(cluster)


def test_a_429_is_retried_after_the_servers_retry_after_not_before(
    cluster: Cluster, run_operator: Start
) -> None:
    """kube-apiserver's priority and fairness answers an overloaded client 429 with Retry-After;
    like client-go, the operator's client waits that long and sends the request again itself."""
    cluster.proxy.fail("create", "pods", code=429, retry_after=1, count=1)
    cluster.rule("*", run_seconds=0.2)
    op = run_operator().wait_started()
    (name,) = run_jobs(cluster, 1)
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    creates = [(t, i.name, code) for t, i, code in cluster.proxy.stats.answered
               if (i.verb, i.resource) == ("create", "pods")]  # fmt: skip
    # The job's 3 pods are created several at a time: the other two go out at once, the
    # throttled one's retry (a create has no name in its URL) is the last, after Retry-After.
    throttled = next(t for t, _, code in creates if code == 429)
    done = sorted(t for t, _, code in creates if code == 201)
    assert len(done) == 3, "a pod was created more or less than once"
    assert done[-1] - throttled >= 0.9, "the throttled create went out before Retry-After"
    assert_no_pod_created_twice(cluster)
    assert op.manager.metrics.reconcile_errors.value(controller="pytorchjob-controller") == 0


def test_a_real_write_conflict_on_the_status_is_re_read_and_re_planned(
    cluster: Cluster, run_operator: Start
) -> None:
    """The operator's status write is held at the proxy while another client changes the job:
    the server answers it 409 Conflict (a stale resourceVersion), and the operator retries."""
    cluster.rule("*", run_seconds=None)
    op = run_operator().wait_started()
    held = cluster.proxy.delay("update", "pytorchjobs/status", seconds=1.5)
    (name,) = run_jobs(cluster, 1)
    wait_for(lambda: held.applied, what="a status write held at the proxy")
    cluster.patch_job("PyTorchJob", name, {"metadata": {"labels": {"raced": "yes"}}})
    wait_for(
        lambda: cluster.proxy.stats.answers[("update", "pytorchjobs/status", 409)] >= 1,
        what="the server's 409",
    )
    wait_for(lambda: len(pods := cluster.pods(name)) == 3 and pods, what="all pods")
    for pod in cluster.pods(name):
        wait_for(lambda p=pod.metadata.name: _running(cluster, p), what="running")  # type: ignore[misc]
        cluster.terminate(pod.metadata.name)
    conditions = cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert conditions["Created"] == "True"
    requeues = op.manager.metrics.reconcile_total.value(
        controller="pytorchjob-controller", result="requeue"
    )
    assert requeues >= 1
    assert cluster.get_job("PyTorchJob", name)["metadata"]["labels"]["raced"] == "yes"
    assert_no_pod_created_twice(cluster)


def _reconciles(op: RunningOperator) -> float:
    total = op.manager.metrics.reconcile_total
    results = ("success", "requeue_after", "requeue", "error")
    return sum(total.value(controller="pytorchjob-controller", result=r) for r in results)


def _running(cluster: Cluster, pod: str) -> bool:
    status = cluster.core.read_namespaced_pod(pod, cluster.namespace).status
    return bool(status.phase == "Running")


def test_injected_conflicting_status_writes_are_re_read_and_re_planned(
    cluster: Cluster, run_operator: Start
) -> None:
    cluster.rule("*", run_seconds=0.2)
    op = run_operator().wait_started()
    cluster.proxy.fail("update", "pytorchjobs/status", code=409, count=5)
    (name,) = run_jobs(cluster, 1)
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    requeues = op.manager.metrics.reconcile_total.value(
        controller="pytorchjob-controller", result="requeue"
    )
    assert requeues >= 1


def test_watches_cut_mid_stream_resume_and_converge(cluster: Cluster, run_operator: Start) -> None:
    pods = cluster.proxy.cut_watch("pods", after_events=1, count=4)
    jobs = cluster.proxy.cut_watch("pytorchjobs", after_events=1, count=2)
    cluster.rule("*", run_seconds=0.2)
    run_operator()
    for name in run_jobs(cluster, 3):
        cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert (pods.applied, jobs.applied) == (4, 2)
    assert_no_pod_created_twice(cluster)


def test_dropped_connections_lost_answers_and_added_latency_still_converge(
    cluster: Cluster, run_operator: Start
) -> None:
    cluster.proxy.lose("create", "pods", count=2)  # created, but the operator cannot know it
    cluster.proxy.drop("create", "services", count=2)  # not created, and no answer either
    cluster.proxy.lose("update", "pytorchjobs/status", count=2)
    cluster.proxy.delay("*", "*", seconds=0.05, count=None)
    cluster.rule("*", run_seconds=None)
    run_operator()
    names = run_jobs(cluster, 2)
    for name in names:  # every service too, though two creations got no answer
        wait_for(lambda n=name: len(cluster.services(n)) == 3, what="services")  # type: ignore[misc]
        wait_for(lambda n=name: len(cluster.pods(n)) == 3, what="pods")  # type: ignore[misc]
    for pod in cluster.pod_adds:
        wait_for(lambda p=pod: _running(cluster, p), what="running")  # type: ignore[misc]
        cluster.terminate(pod, exit_code=0)
    for name in names:
        cluster.wait_condition("PyTorchJob", name, "Succeeded")
    faults = cluster.proxy.stats.faults
    assert faults[("create", "pods", "lose")] == faults[("create", "services", "drop")] == 2
    assert_no_pod_created_twice(cluster)


def test_410_gone_after_compaction_forces_a_relist_and_converges(
    compactable_plane: ControlPlane, registry: KindRegistry, tmp_path: Path
) -> None:
    with open_cluster(compactable_plane, namespace_name("gone"), registry, tmp_path) as cluster:
        op = RunningOperator(cluster).wait_started()
        try:
            pods = op.manager.informers["pods"]
            cluster.rule("*", run_seconds=None)
            (name,) = run_jobs(cluster, 1)
            wait_for(lambda: len(pods.list()) == 3, what="pods cached")
            wait_for(lambda: all(_running(cluster, p["metadata"]["name"]) for p in pods.list()))
            cluster.proxy.delay("watch", "pods", seconds=3)  # the re-watch waits
            assert cluster.proxy.cut_open_watches("pods") == 1
            for pod in cluster.pods(name):  # changes the informer has not seen when it resumes
                cluster.terminate(pod.metadata.name, exit_code=0)
            compactable_plane.compact_etcd()
            cluster.wait_condition("PyTorchJob", name, "Succeeded")
            assert pods.lists == 2
            assert_no_pod_created_twice(cluster)
        finally:
            op.stop()


def test_half_open_watch_is_abandoned_after_the_read_timeout(
    cluster: Cluster, run_operator: Start
) -> None:
    """A watch whose connection stays open but delivers nothing, not even the end of the stream
    at its server-side timeout (a half-open connection), is given up timeoutSeconds + the read
    margin later, and re-opened."""
    cluster.proxy.hang("watch", "pods", count=None)
    op = run_operator(watch_timeout=1, watch_read_timeout=1.0).wait_started()
    before = cluster.proxy.stats.requests[("watch", "pods")]
    wait_for(
        lambda: cluster.proxy.stats.requests[("watch", "pods")] >= before + 3,
        what="watches re-opened",
    )
    assert op.manager.caches_synced()


def test_a_watch_stalled_mid_stream_is_noticed_within_the_bound_and_the_cache_catches_up(
    cluster: Cluster, run_operator: Start, request: pytest.FixtureRequest
) -> None:
    """The pods watch's connection stays open but forwards nothing more (a peer gone behind a
    NAT, a hung load balancer), stalled just after it opened (the worst case): the informer gives
    it up within its bound, watches again from where it was, and the job finishes on pod changes
    the stalled watch never delivered. 2-4 s watches and a 1 s margin (5 s); ``--soak`` runs it
    with the defaults (45 s)."""
    soak = request.config.getoption("--soak")
    timing = (WATCH_TIMEOUT, WATCH_READ_MARGIN) if soak else (2.0, 1.0)
    bound = dead_watch_bound(*timing)
    cluster.rule("*", run_seconds=None)
    op = run_operator(watch_timeout=timing[0], watch_read_timeout=timing[1]).wait_started()
    pods = op.manager.informers["pods"]
    (name,) = run_jobs(cluster, 1)
    workers = [f"{name}-master-0", f"{name}-worker-0", f"{name}-worker-1"]
    wait_for(lambda: len(cluster.pods(name)) == 3, what="the job's pods")
    for pod in workers:
        wait_for(lambda p=pod: _running(cluster, p), what=f"{pod} running")  # type: ignore[misc]
    opened = pods.watches
    wait_for(lambda: pods.watches > opened, bound, "a fresh pods watch")
    wait_for(lambda: cluster.proxy.stall(watch="pods") == 1, what="the pods watch stalled")
    stalled_at, watches = time.monotonic(), pods.watches
    for pod in workers:  # changes only a new watch can deliver
        cluster.terminate(pod, exit_code=0)
    wait_for(lambda: pods.watches > watches, bound + 10, "the stalled watch given up, replaced")
    noticed = time.monotonic() - stalled_at
    # Held at least until the server would have ended the watch, given up within the bound.
    assert timing[0] - 1 <= noticed <= bound + 1, f"noticed after {noticed:.1f} s"
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert pods.lists == 1  # resumed from the last resourceVersion, not re-listed


def test_sigkill_and_restart_mid_run_loses_no_job_and_duplicates_no_pod(
    cluster: Cluster,
) -> None:
    cluster.rule("*", run_seconds=None)
    cluster.proxy.delay("create", "pods", seconds=0.3, count=None)
    names = run_jobs(cluster, 4)
    first = operator_process(cluster)
    try:
        wait_for(lambda: sum(cluster.pod_adds.values()) >= 3, timeout=60, what="some pods")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert sum(cluster.pod_adds.values()) < 12, "killed too late to test anything"
        second = operator_process(cluster)
        try:
            wait_for(lambda: len(cluster.pod_adds) == 12, timeout=60, what="all 12 pods")
            for pod in list(cluster.pod_adds):
                wait_for(lambda p=pod: _running(cluster, p), what="running")  # type: ignore[misc]
                cluster.terminate(pod, exit_code=0)
            for name in names:
                cluster.wait_condition("PyTorchJob", name, "Succeeded")
            assert_no_pod_created_twice(cluster)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0
    finally:
        if first.poll() is None:
            first.kill()


def test_expectations_hold_back_creations_while_the_pod_cache_lags(
    cluster: Cluster, run_operator: Start
) -> None:
    """With the pod watch down, job events still trigger reconciles; none re-creates a pod."""
    op = run_operator().wait_started()
    cluster.proxy.fail("watch", "pods", code=500, count=2)  # ~1.5 s of stale pod cache
    cluster.proxy.cut_open_watches("pods")
    cluster.rule("*", run_seconds=0.2)
    (name,) = run_jobs(cluster, 1)
    for i in range(3):  # job updates during the outage: each one is a reconcile
        cluster.patch_job("PyTorchJob", name, {"metadata": {"labels": {"poke": str(i)}}})
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    assert cluster.proxy.stats.requests[("create", "pods")] == 3  # no AlreadyExists retries
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
    cluster.proxy.fail("watch", "pytorchjobs", code=500, count=2)  # job cache goes stale
    cluster.proxy.cut_open_watches("pytorchjobs")
    # The worker first: the master's exit ends the job, whose pods are then deleted.
    for pod in reversed(cluster.pods(name)):
        cluster.terminate(pod.metadata.name, exit_code=0)
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    wait_for(lambda: not cluster.pods(name), what="pods cleaned up")
    wait_for(lambda: cluster.proxy.stats.open_watches >= 7, what="job watch back")
    assert_no_pod_created_twice(cluster)
    assert cluster.pods(name) == []


def test_a_partitioned_operator_catches_up_when_the_network_heals(
    cluster: Cluster, run_operator: Start
) -> None:
    """Cut off for a while (every connection closed, nothing answered), the operator meets the
    changes it missed when it reconnects, and finishes the job exactly once."""
    cluster.rule("*", run_seconds=None)
    run_operator().wait_started()
    (name,) = run_jobs(cluster, 1)
    wait_for(lambda: len(pods := cluster.pods(name)) == 3 and pods, what="all pods")
    for pod in cluster.pods(name):
        wait_for(lambda p=pod.metadata.name: _running(cluster, p), what="running")  # type: ignore[misc]
    cluster.proxy.partition()
    for pod in cluster.pods(name):  # the job finishes while the operator cannot see it
        cluster.terminate(pod.metadata.name, exit_code=0)
    healed = threading.Timer(2.0, cluster.proxy.heal)
    healed.start()
    cluster.wait_condition("PyTorchJob", name, "Succeeded")
    healed.join()
    assert cluster.proxy.stats.faults[("watch", "pods", "drop")] >= 1  # it did try meanwhile
    assert_no_pod_created_twice(cluster)


def test_a_pod_held_in_terminating_is_replaced_only_once_it_is_gone(
    cluster: Cluster, run_operator: Start
) -> None:
    """A real deletion is graceful: the pod stays (deletionTimestamp set) until its kubelet and
    its finalizers are done. An ExitCode restart must wait for it, not race it with a create."""
    cluster.rule("*", run_seconds=None)
    op = run_operator().wait_started()
    job = minimal_job("PyTorchJob", "held").build()
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["restartPolicy"] = "ExitCode"
    cluster.create_job(job)
    victim = "held-worker-0"
    wait_for(lambda: len(pods := cluster.pods("held")) == 2 and pods, what="pods")
    wait_for(lambda: _running(cluster, victim), what="running")
    hold = {"metadata": {"finalizers": ["trainop.test/hold"]}}
    cluster.core.patch_namespaced_pod(victim, cluster.namespace, hold)
    cluster.terminate(victim, exit_code=137)  # retryable: the operator deletes and re-creates
    wait_for(lambda: cluster.conditions("PyTorchJob", "held").get("Restarting") == "True")
    pod = cluster.core.read_namespaced_pod(victim, cluster.namespace)
    assert pod.metadata.deletion_timestamp is not None  # deleted, but held
    # Reconciles meanwhile must not re-create it: poke the job and wait until that reconcile
    # (which sees the held pod) has run, twice over.
    for poke in ("1", "2"):
        before = _reconciles(op)
        cluster.patch_job("PyTorchJob", "held", {"metadata": {"labels": {"poke": poke}}})
        wait_for(lambda before=before: _reconciles(op) > before, what="the poke reconciled")
    assert cluster.pod_adds[victim] == 1
    assert not cluster.proxy.stats.answers[("create", "pods", 409)]
    cluster.core.patch_namespaced_pod(victim, cluster.namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: cluster.pod_adds[victim] == 2, what="re-created once the old pod is gone")
    wait_for(lambda: _running(cluster, victim), what="the new pod running")
    for pod_name in ("held-master-0", victim):
        cluster.terminate(pod_name, exit_code=0)
    cluster.wait_condition("PyTorchJob", "held", "Succeeded")
    assert op.manager.metrics.reconcile_errors.value(controller="pytorchjob-controller") == 0


def test_an_answer_cut_mid_body_is_a_transport_error_and_the_event_recorder_lives_on(
    cluster: Cluster,
) -> None:
    """The headers came, the body broke off: the client raises its own ApiError (status 0), as
    its contract says, so the recorder (which only expects ApiError) logs it and goes on."""
    from trainop_core.operator.kube import EVENTS, ApiError, KubeClient
    from trainop_core.operator.recorder import EventRecorder

    client = KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    cluster.proxy.cut_answer("create", "events", count=2)
    with pytest.raises(ApiError) as broken:
        client.create(EVENTS, cluster.namespace, _event(cluster.namespace, "direct"))
    assert broken.value.status == 0
    recorder = EventRecorder(client)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "j", "namespace": cluster.namespace, "uid": "u"}}  # fmt: skip
    recorder.record(job, "Normal", "First", "its answer is cut", "c")
    recorder.record(job, "Normal", "Second", "written after that", "c")
    wait_for(
        lambda: "Second" in {e["reason"] for e in client.list(EVENTS, cluster.namespace)["items"]},
        what="the event after the broken answer",
    )
    recorder.stop()


def _event(namespace: str, name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "Test",
        "message": "m",
    }
