"""Kubeflow Trainer v2 TrainJobs through `TrainingClient(backend="kubernetes")`: checked against the
cluster's runtimes, stored as written (trainer.kubeflow.org/v1alpha1), run by trainop's operator
(`--enable-scheme TrainJob`, in-process, on the real kube-apiserver, the kubelet stand-in running
the pods), waited for, listed, followed and deleted by the client through the fault proxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from backend_cluster import wait_for
from builders import make_trainjob
from k8s import K8s

from trainop_core.cli.main import main
from trainop_core.client import TrainingClient, failure_message, is_succeeded, job_state
from trainop_core.errors import InvalidJobError, NotFoundError
from trainop_core.operator.manager import Manager
from trainop_core.runtimes.status import trainjob_state
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Rule
from trainop_core.testing.rest import RestError

RUNTIMES_DIR = Path(__file__).resolve().parents[2] / "operator" / "trainer" / "runtimes"
TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"


@pytest.fixture
def trainer(k8s: K8s) -> K8s:
    """Trainer v2's CRDs and the default ClusterTrainingRuntimes as trainop ships them."""
    k8s.install_trainer()
    return k8s


@pytest.fixture
def operator(trainer: K8s) -> Iterator[Manager]:
    with trainer.operator(enable_schemes=("TrainJob",)) as manager:
        yield manager


@pytest.fixture
def client(kubeconfig: Path) -> TrainingClient:
    return TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))


def trainjob(name: str, runtime: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    return make_trainjob(name, runtime, **spec)


def stored(k8s: K8s, name: str) -> dict[str, Any]:
    found: dict[str, Any] = k8s.rest.get(f"{TRAINER}/namespaces/{k8s.namespace}/trainjobs/{name}")
    return found


def test_a_trainjob_is_created_as_written_run_followed_waited_for_and_deleted(
    trainer: K8s, operator: Manager, client: TrainingClient
) -> None:
    trainer.kubelet.rules[:] = [Rule(run_seconds=0.3, log="epoch 1\nepoch 2\n")]
    written = trainjob("tj", trainer={"numNodes": 2, "command": ["python", "train.py"]})
    created = client.create(written)
    assert (created.kind, created.key) == ("TrainJob", f"{trainer.namespace}/tj")
    on_server = stored(trainer, "tj")
    assert on_server["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    # As written (no replica specs), with the defaults of Trainer's CRDs the API server applies.
    defaults = {"suspend": False, "managedBy": "trainer.kubeflow.org/trainjob-controller"}
    runtime_ref = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}
    expected = written["spec"] | defaults
    expected["runtimeRef"] = written["spec"]["runtimeRef"] | runtime_ref
    assert on_server["spec"] == expected
    assert [(j.kind, j.name) for j in client.list(trainer.namespace)] == [("TrainJob", "tj")]
    followed = list(client.logs("tj", follow=True))  # returns once the job has finished
    assert sorted(x.replica for x in followed if x.text == "epoch 2") == ["node-0", "node-1"]
    finished = client.backend.wait("tj", trainer.namespace, timeout=60)  # type: ignore[attr-defined]
    assert is_succeeded(finished) and trainjob_state(finished) == "Complete"
    assert [(x.replica, x.text) for x in client.logs("tj", replica="node-1")] == [
        ("node-1", "epoch 1"),
        ("node-1", "epoch 2"),
    ]
    client.delete("tj")
    with pytest.raises(NotFoundError):
        client.get("tj")
    with pytest.raises(RestError, match="404"):
        stored(trainer, "tj")


def test_a_failing_node_fails_the_trainjob_with_trainers_reason(
    trainer: K8s, operator: Manager, client: TrainingClient
) -> None:
    trainer.kubelet.rules[:] = [
        Rule(pattern="tj-node-1", run_seconds=0.2, exit_code=3),
        Rule(run_seconds=None),
    ]
    client.create(trainjob("tj", trainer={"numNodes": 2}))
    finished = client.wait("tj", timeout=60)
    assert trainjob_state(finished) == "Failed" and job_state(finished) == "Failed"
    assert "node" in failure_message(finished).lower()
    conditions = stored(trainer, "tj")["status"]["conditions"]
    # JobSet's, which Trainer copies: both nodes are the one child Job tj-node-0.
    message = "jobset failed due to one or more job failures (first failed job: tj-node-0)"
    failed = [(c["reason"], c["message"]) for c in conditions if c["type"] == "Failed"]
    assert failed == [("FailedJobs", message)]


def test_a_runtime_the_cluster_lacks_is_refused_naming_the_field_and_nothing_is_created(
    trainer: K8s, client: TrainingClient, tmp_path: Path
) -> None:
    with pytest.raises(InvalidJobError) as refused:
        client.create(trainjob("tj", runtime="no-such-runtime"))
    assert refused.value.problems[0].path == "spec.runtimeRef.name"
    assert "no-such-runtime" in str(refused.value) and "torch-distributed" in str(refused.value)
    # A runtime trainop ships but the cluster does not hold is refused too: the cluster decides.
    local_only = tmp_path / "runtimes"
    local_only.mkdir()
    with pytest.raises(InvalidJobError, match="runtimes"):
        client.create(trainjob("tj"), runtimes=local_only)
    listed = trainer.rest.get(f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs")
    assert listed["items"] == []


def test_env_the_runtimes_policy_sets_is_refused_naming_the_entry_and_nothing_is_created(
    trainer: K8s, client: TrainingClient
) -> None:
    env = [{"name": "OK", "value": "1"}, {"name": "PET_NNODES", "value": "4"}]
    with pytest.raises(InvalidJobError) as refused:
        client.create(trainjob("tj", trainer={"env": env}))
    [problem] = refused.value.problems
    assert problem.path == "spec.trainer.env[1].name"
    assert "must not have reserved envs" in problem.message
    listed = trainer.rest.get(f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs")
    assert listed["items"] == []


def test_a_namespaced_training_runtime_is_found_in_the_trainjobs_namespace(
    trainer: K8s, operator: Manager, client: TrainingClient
) -> None:
    trainer.kubelet.rules[:] = [Rule(run_seconds=0.2)]
    runtime = yaml.safe_load((RUNTIMES_DIR / "torch-distributed.yaml").read_text())
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "team-torch", "namespace": trainer.namespace}
    trainer.rest.create(f"{TRAINER}/namespaces/{trainer.namespace}/trainingruntimes", runtime)
    ref = {"name": "team-torch", "kind": "TrainingRuntime"}
    created = client.create(trainjob("tj", runtimeRef=ref, trainer={"numNodes": 3}))
    assert [s.replicas for s in created.spec.replica_specs.values()] == [3]
    assert is_succeeded(client.wait("tj", timeout=60))
    # The runtime deleted since: the job is still read, its nodes from its own spec.
    trainer.rest.delete(f"{TRAINER}/namespaces/{trainer.namespace}/trainingruntimes/team-torch")
    read = client.get("tj")
    assert [s.replicas for s in read.spec.replica_specs.values()] == [3]
    assert trainjob_state(read) == "Complete"


def test_an_invalid_trainjob_is_refused_before_any_request(
    trainer: K8s, k8s_proxy: FaultProxy, client: TrainingClient
) -> None:
    with pytest.raises(InvalidJobError, match=r"spec.trainer.numNodes"):
        client.create(trainjob("tj", trainer={"numNodes": 0}))
    assert sum(k8s_proxy.stats.requests.values()) == 0, k8s_proxy.stats.requests


def test_suspend_resume_and_stop_act_on_the_trainjob(
    trainer: K8s, operator: Manager, client: TrainingClient
) -> None:
    trainer.kubelet.rules[:] = [Rule(run_seconds=None)]
    client.create(trainjob("tj", suspend=True))
    wait_for(lambda: trainjob_state(client.get("tj")) == "Suspended", 60)
    assert trainer.rest.get(f"/api/v1/namespaces/{trainer.namespace}/pods")["items"] == []
    client.resume("tj")
    assert stored(trainer, "tj")["spec"]["suspend"] is False
    wait_for(lambda: job_state(client.get("tj")) == "Running", 60)
    client.stop("tj", reason="stopped by the test")
    finished = client.wait("tj", timeout=60)
    assert trainjob_state(finished) == "Failed"
    assert failure_message(finished) == "stopped by the test"
    pods = trainer.rest.get(f"/api/v1/namespaces/{trainer.namespace}/pods")["items"]
    assert all(p["status"].get("phase") not in ("Pending", "Running") for p in pods)


def test_a_trainjob_trainer_runs_is_read_from_trainers_own_conditions(
    trainer: K8s, client: TrainingClient
) -> None:
    """No trainop operator: the status is only Trainer's (no plannerStatus), as Trainer writes
    it; waiting ends on its Complete condition, and Trainer's reason and message are kept."""
    client.create(trainjob("tj", trainer={"numNodes": 2}))
    path = f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs/tj/status"
    obj = trainer.rest.get(path)
    obj["status"] = {
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
             "message": "TrainJob exceeded its active deadline",
             "lastTransitionTime": "2026-12-03T10:00:00Z"},
        ]
    }  # fmt: skip
    trainer.rest.replace(path, obj)
    finished = client.wait("tj", timeout=30)
    assert trainjob_state(finished) == "Failed"
    assert failure_message(finished) == "TrainJob exceeded its active deadline"
    assert (
        finished.status is not None and finished.status.conditions[0].reason == "DeadlineExceeded"
    )


def test_trainop_submit_with_a_queue_labels_the_trainjob_as_kueue_reads_it_and_get_shows_it(
    trainer: K8s, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    path = tmp_path / "tj.yaml"
    path.write_text(yaml.safe_dump(trainjob("tj", trainer={"numNodes": 2})))
    assert main(["submit", str(path), "--backend", "kubernetes", "--queue", "team-a"]) == 0
    assert capsys.readouterr().out == "trainjob.trainer.kubeflow.org/tj created\n"
    labels = stored(trainer, "tj")["metadata"]["labels"]
    assert labels == {"kueue.x-k8s.io/queue-name": "team-a"}
    assert main(["get", "--backend", "kubernetes"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "KIND", "STATE", "PROGRESS", "ETA", "AGE", "REPLICAS"]
    name, kind, state, _, replicas = row.split(maxsplit=4)  # PROGRESS, ETA: none reported
    assert (name, kind, state, replicas) == ("tj", "TrainJob", "Created", "node 0/2")


def test_trainop_run_follows_a_trainjob_on_the_cluster_to_complete_and_removes_it(
    trainer: K8s, operator: Manager, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    trainer.kubelet.rules[:] = [Rule(run_seconds=0.3, log="loss=0.5\n")]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    path = tmp_path / "tj.yaml"
    path.write_text(yaml.safe_dump(trainjob("tj", trainer={"numNodes": 2})))
    assert main(["run", str(path), "--backend", "kubernetes", "--rm", "--timeout", "60"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(line for line in out if "loss" in line) == [
        "node-0 | loss=0.5",
        "node-1 | loss=0.5",
    ]
    listed = trainer.rest.get(f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs")
    assert listed["items"] == []  # --rm


def test_trainop_get_prints_the_trainjob_as_stored_and_the_output_applies_again(
    trainer: K8s, operator: Manager, kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import json
    import subprocess

    trainer.kubelet.rules[:] = [Rule(run_seconds=0.2)]
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    path = tmp_path / "tj.yaml"
    path.write_text(yaml.safe_dump(trainjob("tj", trainer={"numNodes": 2})))
    assert main(["run", str(path), "--backend", "kubernetes", "--timeout", "60"]) == 0
    capsys.readouterr()
    assert main(["get", "tj", "-o", "yaml", "--backend", "kubernetes"]) == 0
    shown = capsys.readouterr().out
    assert main(["get", "tj", "-o", "json", "--backend", "kubernetes"]) == 0
    printed = yaml.safe_load(shown)
    assert json.loads(capsys.readouterr().out) == printed
    on_server = stored(trainer, "tj")
    on_server["metadata"].pop("managedFields")  # as kubectl shows it
    assert printed == on_server  # as stored: runtimeRef, trainer, Trainer's status
    assert printed["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert [c["type"] for c in printed["status"]["conditions"]] == ["Complete"]
    assert printed["status"]["jobsStatus"][0]["succeeded"] == 1
    assert "replicaSpecs" not in shown and "runPolicy:" not in shown
    # Applied again as it is (resourceVersion, uid and status in it): nothing changes.
    out = tmp_path / "shown.yaml"
    out.write_text(shown)
    applied = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "apply", "--server-side", "-f", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert stored(trainer, "tj")["metadata"]["generation"] == printed["metadata"]["generation"]
    # ... and after the job is gone, it is submitted again as a new TrainJob that runs.
    assert main(["delete", "tj", "--backend", "kubernetes"]) == 0
    listing = f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs"
    wait_for(lambda: trainer.rest.get(listing)["items"] == [], 30)
    assert main(["run", str(out), "--backend", "kubernetes", "--timeout", "60"]) == 0
    again = stored(trainer, "tj")
    assert again["metadata"]["uid"] != printed["metadata"]["uid"]
    assert again["spec"] == printed["spec"]


def test_trainop_get_shows_the_trainer_status_trainer_wrote_and_none_where_none_was_written(
    trainer: K8s, client: TrainingClient, kubeconfig: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """No trainop operator: `status.trainerStatus` written through the status subresource, as
    Trainer's status server applies it, is what `trainop get` shows (PROGRESS, ETA) and prints
    (-o yaml, metrics in their stored order); a job with none shows none."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    client.create(trainjob("tj", trainer={"numNodes": 2}))
    client.create(trainjob("quiet"))
    path = f"{TRAINER}/namespaces/{trainer.namespace}/trainjobs/tj/status"
    reported = {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 795649,
        "metrics": [
            {"name": "loss", "value": "0.2347"},
            {"name": "eval_loss", "value": "0.2451"},
            {"name": "accuracy", "value": "0.9876"},
        ],
        "lastUpdatedTime": "2026-12-03T10:30:45Z",
    }
    obj = trainer.rest.get(path)
    trainer.rest.replace(path, dict(obj, status={"trainerStatus": reported}))
    assert stored(trainer, "tj")["status"]["trainerStatus"] == reported

    assert main(["get", "--backend", "kubernetes"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    at = {name: header.index(name) for name in ("NAME", "PROGRESS", "ETA", "AGE")}
    rows = {
        line[: at["PROGRESS"]].split()[0]: (
            line[at["PROGRESS"] : at["ETA"]].strip(),
            line[at["ETA"] : at["AGE"]].strip(),
        )
        for line in lines
    }
    assert rows == {"tj": ("45%", "9d"), "quiet": ("", "")}  # 795649 s: 9 days, kubectl's way

    assert main(["get", "tj", "-o", "yaml", "--backend", "kubernetes"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    on_server = stored(trainer, "tj")
    on_server["metadata"].pop("managedFields")
    assert printed == on_server and printed["status"]["trainerStatus"] == reported
    assert main(["get", "quiet", "-o", "yaml", "--backend", "kubernetes"]) == 0
    assert "trainerStatus" not in (yaml.safe_load(capsys.readouterr().out).get("status") or {})
