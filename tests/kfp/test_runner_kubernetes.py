"""The KFP components' body with backend="kubernetes" (what a pipeline step runs in a cluster):
`run_job` and `trainop_run`'s `trainop run --rm`, against the real kube-apiserver (the session's
control plane, a namespace per test, `$KUBECONFIG` pointing at it) with the trainop operator; the
kubelet stand-in plays the pods and serves their logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from k8s import K8s
from kfp_support import python_job
from trainop_kfp.runner import TrainingJobFailed, run_cli, run_job

from trainop_core.client import TrainingClient
from trainop_core.testing.kubelet import Rule

MASTER_LOG = "starting\nloss=0.5 step=1\nloss=0.25 accuracy=0.9 step=2\n"


@pytest.fixture
def cluster(k8s: K8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[K8s]:
    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig_here(tmp_path / "kubeconfig")))
    with k8s.operator():
        yield k8s


def jobs_left(cluster: K8s) -> list[str]:
    return [j.name for j in TrainingClient("kubernetes").list(cluster.namespace)]


def test_run_job_returns_the_primary_replicas_metrics_and_deletes_the_job(cluster: K8s) -> None:
    cluster.kubelet.rules[:] = [
        Rule("*-master-0", run_seconds=0.3, log=MASTER_LOG),
        Rule("*", run_seconds=0.3, log="loss=99 step=1\n"),
    ]
    echoed: list[str] = []
    result = run_job(
        python_job("k8s-ok", "pass"), backend="kubernetes", timeout_seconds=60, echo=echoed.append
    )
    assert (result.state, result.namespace) == ("Succeeded", cluster.namespace)
    assert result.metrics == {"loss": 0.25, "accuracy": 0.9}  # the Master's, not the Worker's
    assert "master-0 | loss=0.25 accuracy=0.9 step=2" in echoed
    assert jobs_left(cluster) == []


def test_a_failed_pod_fails_the_step_with_the_jobs_reason_and_its_log(cluster: K8s) -> None:
    cluster.kubelet.rules[:] = [
        Rule("*-master-0", run_seconds=0.2, exit_code=3, log="out of disk on /data\n"),
        Rule("*", run_seconds=None),
    ]
    with pytest.raises(TrainingJobFailed) as failed:
        run_job(python_job("k8s-broken", "pass"), backend="kubernetes", timeout_seconds=60)
    assert failed.value.result.state == "Failed"
    assert "out of disk on /data" in str(failed.value)
    assert jobs_left(cluster) == []


def test_trainop_run_component_runs_the_job_on_the_cluster(cluster: K8s) -> None:
    cluster.kubelet.rules[:] = [Rule("*", run_seconds=0.3, log="done\n")]
    job_yaml = yaml.safe_dump(python_job("k8s-cli", "pass"))
    run_cli(job_yaml=job_yaml, backend="kubernetes", namespace="", timeout_seconds=60)
    assert jobs_left(cluster) == []  # --rm
    events = cluster.rest.get(f"/api/v1/namespaces/{cluster.namespace}/events")["items"]
    assert "PyTorchJobSucceeded" in {e["reason"] for e in events}


def test_run_job_runs_a_trainjob_on_the_cluster_with_node_0_as_the_primary(
    k8s: K8s, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TrainJob is stored as such (trainop's operator with --enable-scheme TrainJob runs
    it); the step's metrics are node 0's, and the job is deleted after."""
    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig_here(tmp_path / "kubeconfig")))
    k8s.install_trainer()
    k8s.kubelet.rules[:] = [
        Rule("*-node-0", run_seconds=0.3, log="loss=0.25 rank=0\n"),
        Rule("*", run_seconds=0.3, log="loss=99 rank=1\n"),
    ]
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2.0}},
    }
    echoed: list[str] = []
    with k8s.operator(enable_schemes=("TrainJob",)):
        result = run_job(job, backend="kubernetes", timeout_seconds=60, echo=echoed.append)
        assert (result.state, result.namespace) == ("Succeeded", k8s.namespace)
        assert result.metrics == {"loss": 0.25, "rank": 0.0}  # node 0's
        assert "node-0 | loss=0.25 rank=0" in echoed
        assert jobs_left(k8s) == []
