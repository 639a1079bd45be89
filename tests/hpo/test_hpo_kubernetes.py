"""The trial runner on the Kubernetes backend: the same calls as locally, against the real
kube-apiserver (the session's control plane, a namespace per test) with the real operator; the
kubelet stand-in plays the pods and serves their logs. Only the primary pod's metric lines may
reach the runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job, make_trainjob
from k8s import K8s
from trainop_hpo import TrialRunner

from trainop_core.client import TrainingClient
from trainop_core.errors import NotFoundError
from trainop_core.testing.kubelet import Rule

MASTER_LOG = "starting\nloss=0.5 step=1\nloss=0.25 accuracy=0.9 step=2\ndone\n"
METRIC_RULES = [
    Rule(pattern="*-master-0", run_seconds=0.3, log=MASTER_LOG),
    Rule(pattern="*-worker-*", run_seconds=0.3, log="loss=99 step=1\n"),
]


@pytest.fixture
def server(k8s: K8s) -> Iterator[K8s]:
    """The test's namespace with the operator running on it."""
    with k8s.operator():
        yield k8s


@pytest.fixture
def kubeconfig(server: K8s, tmp_path: Path) -> Path:
    """The admin, in the test's namespace (where the trials' jobs go)."""
    return server.kubeconfig_here(tmp_path / "kubeconfig")


@pytest.fixture
def client(kubeconfig: Path) -> TrainingClient:
    return TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))


def template(kind: str) -> dict[str, object]:
    builder = make_job(kind, "k8s-quad").master(restart_policy="Never").workers(2)
    builder.command(["python", "train.py", "--lr", "${trialParameters.lr}"])
    return builder.build()


@pytest.mark.parametrize("kind", ["PyTorchJob", "XGBoostJob"])
def test_metrics_come_from_the_primary_pod_only(
    server: K8s, client: TrainingClient, kind: str
) -> None:
    server.kubelet.rules[:] = METRIC_RULES
    runner = TrialRunner(template(kind), client)
    with runner.start({"lr": 0.1}, trial_id="k1") as trial:
        records = [(r.step, r.values) for r in trial.metrics()]
        result = trial.result(timeout=60)
    assert records == [(1, {"loss": 0.5}), (2, {"loss": 0.25, "accuracy": 0.9})]
    assert result.state == "Succeeded"
    assert result.metrics == {"loss": 0.25, "accuracy": 0.9}
    with pytest.raises(NotFoundError):
        client.get(runner.job_name("k1"))


def test_a_failed_pod_fails_the_trial_with_the_jobs_reason(
    server: K8s, client: TrainingClient
) -> None:
    server.kubelet.rules[:] = [
        Rule(pattern="*-master-0", run_seconds=0.2, exit_code=1, log="loss=1 step=1\n"),
        Rule(run_seconds=None),
    ]
    with TrialRunner(template("PyTorchJob"), client).start({"lr": 0.1}) as trial:
        result = trial.result(timeout=60)
        name = trial.job_name
    assert result.state == "Failed"
    assert "Master replica(s) failed" in result.reason
    assert result.metrics == {"loss": 1.0}
    with pytest.raises(NotFoundError):
        client.get(name)


@pytest.mark.slow
def test_a_ray_tune_search_runs_its_trials_as_kubernetes_jobs(
    local_ray: None, server: K8s, kubeconfig: Path, client: TrainingClient, tmp_path: Path
) -> None:
    from trainop_hpo import summarize, tune_job

    server.kubelet.rules[:] = METRIC_RULES
    grid = tune_job(
        template("PyTorchJob"),
        {"lr": "grid:0.1,0.2"},
        "loss",
        backend="kubernetes",
        backend_options={"kubeconfig": str(kubeconfig)},
        resources_per_trial={"cpu": 0.5},
        storage_path=tmp_path / "tune",
    )
    rows = summarize(grid, "loss", "min")
    assert [(r.params, r.metric, r.state) for r in rows] == [
        ({"lr": 0.1}, 0.25, "Succeeded"),
        ({"lr": 0.2}, 0.25, "Succeeded"),
    ]
    assert client.list(server.namespace) == [], "every trial's job was deleted"


def test_a_trainjob_template_runs_its_trials_as_trainjobs_with_node_0s_metrics(
    k8s: K8s, tmp_path: Path
) -> None:
    k8s.install_trainer()
    k8s.kubelet.rules[:] = [
        Rule(pattern="*-node-0", run_seconds=0.3, log=MASTER_LOG),
        Rule(pattern="*-node-*", run_seconds=0.3, log="loss=99 step=1\n"),
    ]
    trainjob = make_trainjob(
        "k8s-quad",
        trainer={"numNodes": 2, "command": ["python", "train.py", "--lr", "${trialParameters.lr}"]},
    )
    kubeconfig = k8s.kubeconfig_here(tmp_path / "kubeconfig")
    client = TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))
    runner = TrialRunner(trainjob, client)
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{k8s.namespace}/trainjobs/"
    with k8s.operator(enable_schemes=("TrainJob",)), runner.start({"lr": 0.1}, "t1") as trial:
        stored = k8s.rest.get(path + runner.job_name("t1"))
        records = [(r.step, r.values) for r in trial.metrics()]
        result = trial.result(timeout=60)
    assert stored["spec"]["trainer"]["command"][-1] == "0.1"
    assert records == [(1, {"loss": 0.5}), (2, {"loss": 0.25, "accuracy": 0.9})]
    assert (result.state, result.metrics) == ("Succeeded", {"loss": 0.25, "accuracy": 0.9})
