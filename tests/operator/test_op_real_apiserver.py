"""The operator against a real kube-apiserver (the session's control plane, tests/k8s.py).

Smoke tests of the whole path (operator, kubelet stand-in, garbage collection) and regressions
for what only a real server showed: a watch the server ends normally must not be counted as a
failure (urllib3's shutdown() after the body was read), and an idle watch, on which a real server
sends no bytes at all, must not be cut by the client's read timeout.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import yaml
from builders import make_job
from k8s import K8s

from trainop_core.testing.builders import wait_for
from trainop_core.testing.kubelet import Rule
from trainop_core.testing.rest import RestError

INFORMER_LOG = "trainop_core.operator.informer"
CLUSTER_ROLE = Path(__file__).parents[2] / "operator" / "base" / "rbac" / "cluster_role.yaml"


def job_status(k8s: K8s, plural: str, name: str) -> dict[str, str]:
    job = k8s.rest.get(k8s.job_path(plural, name))
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}


def pods_of(k8s: K8s, job: str) -> list[dict]:
    path = f"/api/v1/namespaces/{k8s.namespace}/pods"
    items = k8s.rest.get(path, labelSelector=f"training.kubeflow.org/job-name={job}")["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def test_a_pytorchjob_runs_to_succeeded_and_its_pods_are_collected_after_delete(k8s: K8s) -> None:
    k8s.kubelet.rules[:] = [Rule("smoke-*", run_seconds=0.5)]
    job = make_job("PyTorchJob", "smoke").master().workers(2).build()
    with k8s.operator():
        k8s.rest.create(k8s.job_path("pytorchjobs"), job)
        wait_for(lambda: job_status(k8s, "pytorchjobs", "smoke").get("Succeeded") == "True", 60)
        pods = pods_of(k8s, "smoke")
        assert [p["metadata"]["name"] for p in pods] == [
            "smoke-master-0",
            "smoke-worker-0",
            "smoke-worker-1",
        ]
        assert {p["spec"]["nodeName"] for p in pods} == {k8s.kubelet.node_name}
        assert pods[0]["status"]["phase"] == "Succeeded"  # the master decides for PyTorch
        k8s.rest.delete(k8s.job_path("pytorchjobs", "smoke"))
        # kube-controller-manager's garbage collector follows the owner references
        wait_for(lambda: not pods_of(k8s, "smoke"), 60)
    with pytest.raises(RestError) as gone:
        k8s.rest.get(k8s.job_path("pytorchjobs", "smoke"))
    assert gone.value.status == 404


def test_the_operator_runs_a_job_as_the_service_account_of_its_cluster_role(k8s: K8s) -> None:
    """Not as admin: the ClusterRole shipped in operator/ is all it is granted."""
    role = yaml.safe_load(CLUSTER_ROLE.read_text())
    role["metadata"]["name"] = f"{k8s.namespace}-operator"
    k8s.rest.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    token = k8s.control_plane.service_account_token(
        k8s.namespace, "training-operator", cluster_roles=[role["metadata"]["name"]]
    )
    k8s.kubelet.rules[:] = [Rule("*", run_seconds=0.2)]
    with k8s.operator(token=token):
        k8s.rest.create(k8s.job_path("tfjobs"), make_job("TFJob", "rbac").workers(2).build())
        wait_for(lambda: job_status(k8s, "tfjobs", "rbac").get("Succeeded") == "True", 60)


def test_a_watch_the_server_ends_is_resumed_at_once_without_an_error(
    k8s: K8s, caplog: pytest.LogCaptureFixture
) -> None:
    """Every informer's watch ends after 1-2 s (timeoutSeconds): no error may be logged (the
    urllib3 RuntimeError hid as one), and no backoff may slow the next watch down."""
    caplog.set_level(logging.INFO, logger=INFORMER_LOG)
    with k8s.operator(watch_timeout=1) as manager:
        wait_for(manager.caches_synced, 30)
        pods = manager.informers["pods"]
        first, started = pods.watches, time.monotonic()
        wait_for(lambda: pods.watches >= first + 5, 30)
        elapsed = time.monotonic() - started
    assert not [r.getMessage() for r in caplog.records if r.name == INFORMER_LOG]
    # five watches of at most 2 s each; a backoff (0.5, 1, 2, 4, 8 s) would add 15 s more
    assert elapsed < 5 * 2 + 5, f"5 watches took {elapsed:.1f} s"


@pytest.mark.timeout(900)  # with --soak it idles 630 s
def test_an_idle_operator_logs_no_watch_errors(
    k8s: K8s, caplog: pytest.LogCaptureFixture, idle_seconds: float
) -> None:
    """A real server sends nothing on an idle watch until its timeout; the client must not give
    up first. Short watches (3-6 s) and a 2 s read margin make a bounded test of what, with the
    defaults, takes 40 s; ``--soak`` runs it for 10 minutes with the default options."""
    caplog.set_level(logging.INFO, logger="trainop_core")
    options = {} if idle_seconds >= 600 else {"watch_timeout": 3, "watch_read_timeout": 2}
    with k8s.operator(**options) as manager:
        wait_for(manager.caches_synced, 30)
        time.sleep(idle_seconds)
        watches = {name: informer.watches for name, informer in manager.informers.items()}
    errors = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.name == INFORMER_LOG or r.levelno >= logging.WARNING
    ]
    assert not errors
    assert all(n >= 2 for n in watches.values()), f"some watch never ended: {watches}"
