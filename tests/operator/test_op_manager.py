"""The manager in-process against the real kube-apiserver: scheme and namespace scoping, shared
watches (counted by the fault proxy), probes and metrics."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from builders import minimal_job
from k8s import delete_namespace
from opkit import Cluster, RunningOperator, wait_for

Start = Callable[..., RunningOperator]


def test_enable_scheme_pytorchjob_leaves_tfjobs_alone(
    cluster: Cluster, run_operator: Start
) -> None:
    run_operator(enable_schemes=("pytorchjob",)).wait_started()
    cluster.rule("*", run_seconds=0.2)
    cluster.create_job(minimal_job("TFJob", "tf").build())
    cluster.create_job(minimal_job("PyTorchJob", "pt").build())
    cluster.wait_condition("PyTorchJob", "pt", "Succeeded")  # created after tf: proof of work
    # The operator never asked the server anything about TFJobs, so it cannot have acted on one.
    assert not [(verb, res) for verb, res in cluster.proxy.stats.requests if "tfjobs" in res]
    assert cluster.pods("tf") == []
    assert "status" not in cluster.get_job("TFJob", "tf")
    watched = {res for verb, res in cluster.proxy.stats.requests if verb == "watch"}
    assert watched == {"pytorchjobs", "pods", "services"}


def test_one_watch_per_resource_type_is_shared_by_every_controller(
    cluster: Cluster, run_operator: Start
) -> None:
    run_operator(controller_threads=2).wait_started()
    watches = {res: n for (verb, res), n in cluster.proxy.stats.requests.items() if verb == "watch"}
    assert watches == {
        "tfjobs": 1,
        "pytorchjobs": 1,
        "mxjobs": 1,
        "xgboostjobs": 1,
        "jaxjobs": 1,
        "paddlejobs": 1,
        "mpijobs": 1,
        "pods": 1,
        "services": 1,
    }  # MPIJob's ConfigMaps and RBAC objects are written, never watched (no cluster-wide caches)


def test_namespace_mode_ignores_other_namespaces(cluster: Cluster, run_operator: Start) -> None:
    other = f"{cluster.namespace}-other"
    cluster.control_plane.ensure_namespace(other)
    try:
        run_operator().wait_started()  # on the cluster's namespace only
        cluster.rule("*", run_seconds=0.2)
        cluster.create_job(minimal_job("PyTorchJob", "elsewhere").build(), namespace=other)
        cluster.create_job(minimal_job("PyTorchJob", "mine").build())
        cluster.wait_condition("PyTorchJob", "mine", "Succeeded")  # created after: proof of work
        # Every request named its own namespace (a cluster-wide one would count under ""), so
        # it never saw the other job and cannot have acted on it.
        assert set(cluster.proxy.stats.namespaces) == {cluster.namespace}
        assert cluster.pods("elsewhere", namespace=other) == []
        assert "status" not in cluster.get_job("PyTorchJob", "elsewhere", namespace=other)
    finally:
        delete_namespace(cluster.control_plane, other)


def test_unrelated_pods_are_not_cached(cluster: Cluster, run_operator: Start) -> None:
    cluster.core.create_namespaced_pod(
        cluster.namespace,
        {"metadata": {"name": "stranger"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    op = run_operator().wait_started()
    assert op.manager.informers["pods"].list() == []


def test_the_caches_keep_of_pods_and_services_only_what_the_controllers_read(
    cluster: Cluster, run_operator: Start
) -> None:
    """A pod's spec is most of its size and is never read back: the cache drops it (as a
    controller-runtime cache transform would), and jobs still run to the end."""
    op = run_operator().wait_started()
    cluster.rule("*", run_seconds=0.2)
    cluster.create_job(minimal_job("PyTorchJob", "lean").build())
    informers = op.manager.informers
    wait_for(
        lambda: (
            (pods := informers["pods"].list())
            and all(p["status"].get("phase") == "Succeeded" for p in pods)
        ),
        what="every cached pod Succeeded",
    )
    pods, services = informers["pods"].list(), informers["services"].list()
    assert pods and services
    for obj in [*pods, *services]:
        assert "spec" not in obj and "managedFields" not in obj["metadata"]
        assert obj["metadata"]["ownerReferences"][0]["name"] == "lean"
        assert obj["metadata"]["labels"]["training.kubeflow.org/job-name"] == "lean"
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    assert all(p["status"]["containerStatuses"][0]["state"]["terminated"] for p in pods)


def test_metrics_endpoint_serves_job_controller_queue_and_client_counters(
    cluster: Cluster, run_operator: Start
) -> None:
    op = run_operator().wait_started()
    cluster.rule("*", run_seconds=0.2)
    cluster.create_job(minimal_job("XGBoostJob", "xgb").build())
    cluster.wait_condition("XGBoostJob", "xgb", "Succeeded")
    labels = f'{{job_namespace="{cluster.namespace}",framework="xgboost"}}'
    _, text = wait_for(
        lambda: (
            (r := op.get("/metrics"))[0] == 200
            and f"training_operator_jobs_successful_total{labels} 1" in r[1]
            and r
        ),
        what="successful counter",
    )
    assert f"training_operator_jobs_created_total{labels} 1" in text
    assert 'controller_runtime_reconcile_total{controller="xgboostjob-controller",result=' in text
    assert (
        'controller_runtime_reconcile_time_seconds_count{controller="xgboostjob-controller"}'
        in text
    )
    assert 'workqueue_adds_total{name="xgboostjob-controller"}' in text
    assert 'rest_client_requests_total{verb="POST",code="201"}' in text
    assert (
        f'training_operator_job_duration_seconds_count{{job_namespace="{cluster.namespace}",'
        'framework="xgboost",state="Succeeded"} 1' in text
    )


def test_running_and_pending_gauges_follow_the_jobs(cluster: Cluster, run_operator: Start) -> None:
    op = run_operator().wait_started()
    cluster.rule("run-*", run_seconds=None)
    cluster.create_job(minimal_job("PyTorchJob", "run").build())
    cluster.create_job(minimal_job("PyTorchJob", "wait").build())  # no rule: stays Pending
    labels = f'{{job_namespace="{cluster.namespace}",framework="pytorch"}}'
    wait_for(
        lambda: f"training_operator_jobs_running{labels} 1" in op.get("/metrics")[1],
        what="running gauge",
    )
    assert f"training_operator_jobs_pending{labels} 1" in op.get("/metrics")[1]


def test_healthz_and_readyz(cluster: Cluster, run_operator: Start) -> None:
    cluster.proxy.fail("list", "pods", code=500, count=None)
    op = run_operator()
    wait_for(lambda: op.get("/healthz") == (200, "ok\n"), what="healthz")
    status, body = op.get("/readyz")
    assert status == 500 and "caches" in body
    cluster.proxy.clear()
    wait_for(lambda: op.get("/readyz") == (200, "ok\n"), what="ready once caches sync")
    assert op.get("/nope")[0] == 404


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_fails_once_a_controller_has_lost_a_worker(
    cluster: Cluster, run_operator: Start
) -> None:
    """A worker that ends while the manager runs leaves its kind's jobs unreconciled (the
    10,000-job benchmark's XGBoostJobs stalled so); liveness names it, so a kubelet restarts
    the operator."""
    op = run_operator().wait_started()
    controller = op.manager.controllers["PyTorchJob"]

    def bug(key: str) -> None:
        raise SystemExit  # nothing a reconcile raises: ends the thread, printing nothing

    controller._process = bug  # type: ignore[method-assign]
    assert op.get("/healthz") == (200, "ok\n")
    cluster.create_job(minimal_job("PyTorchJob", "ends-a-worker").build())
    wait_for(lambda: op.get("/healthz")[0] == 500, what="liveness failing")
    assert "workers" in op.get("/healthz")[1]
    assert op.get("/readyz") == (200, "ok\n")  # only liveness: the caches are fine


def test_shutdown_is_clean_and_returns_0(cluster: Cluster, run_operator: Start) -> None:
    op = run_operator().wait_started()
    assert op.stop() == 0
    assert not op.thread.is_alive()


def test_pytorch_init_container_flags_reach_the_worker_pods(
    cluster: Cluster, run_operator: Start
) -> None:
    run_operator(
        pytorch_init_container_image="busybox:1.36", pytorch_init_container_max_tries=7
    ).wait_started()
    cluster.create_job(minimal_job("PyTorchJob", "init").build())
    pods = wait_for(lambda: len(p := cluster.pods("init")) == 2 and p, what="pods")
    worker = next(p for p in pods if p.metadata.name == "init-worker-0")
    (init,) = worker.spec.init_containers
    assert init.image == "busybox:1.36"
    assert "7" in " ".join(init.command or []) + " ".join(init.args or [])
