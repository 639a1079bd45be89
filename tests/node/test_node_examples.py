"""The examples applied with kubectl train through the operator on process nodes: their pods are
scheduled by kube-scheduler onto the two nodes, find each other through cluster DNS and print
their accuracy line, read back from the nodes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s import K8s, fast_operator_options
from nodekit import NodeCluster, expectations

from trainop_core.testing.builders import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
PLURALS = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "XGBoostJob": "xgboostjobs",
           "JAXJob": "jaxjobs", "PaddleJob": "paddlejobs", "MPIJob": "mpijobs"}  # fmt: skip


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def applied(
    example: str, ns: str, kubeconfig: Path, tmp_path: Path, env: dict[str, str]
) -> dict[str, Any]:
    job = yaml.safe_load((ROOT / example).read_text())
    job["metadata"]["namespace"] = ns
    for replica in next(v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs")).values():
        for container in replica["template"]["spec"]["containers"]:
            extra = [{"name": k, "value": v} for k, v in env.items()]
            container["env"] = [*(container.get("env") or []), *extra]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    kubectl(kubeconfig, "apply", "-f", str(path))
    return dict(job)


def finished(cluster: NodeCluster, job: dict[str, Any]) -> str:
    meta = job["metadata"]
    path = f"/apis/kubeflow.org/v1/namespaces/{meta['namespace']}/{PLURALS[job['kind']]}"
    conditions = cluster.cp.rest.get(f"{path}/{meta['name']}").get("status", {}).get("conditions")
    done = [c["type"] for c in conditions or [] if c["status"] == "True"]
    return next((c for c in done if c in ("Succeeded", "Failed")), "")


def all_logs(cluster: NodeCluster, ns: str) -> str:
    pods = cluster.cp.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    return "\n".join(cluster.log(ns, p["metadata"]["name"]) for p in pods)


def run_example(
    example: str,
    cluster: NodeCluster,
    ns: str,
    kubeconfig: Path,
    tmp_path: Path,
    registry: Any,
    env: dict[str, str] | None = None,
    gone: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Apply `example` (with `env` added to its containers), wait for the job to end, check
    its output (but the lines `gone`, printed by pods deleted since, with their logs); the job
    as it ended."""
    from clusters import running_operator

    expected = expectations.EXAMPLES[example]
    with running_operator(cluster.cp, registry, fast_operator_options(ns)):
        job = applied(example, ns, kubeconfig, tmp_path, env or {})
        outcome = wait_for(lambda: finished(cluster, job), expected["timeout_s"] * 2, 0.5)
        logs = all_logs(cluster, ns)
        meta = job["metadata"]
        path = f"/apis/kubeflow.org/v1/namespaces/{ns}/{PLURALS[job['kind']]}/{meta['name']}"
        ended: dict[str, Any] = cluster.cp.rest.get(path)
    assert outcome == "Succeeded", logs[-3000:]
    for pattern in [p for p in expected["must_match"] if p not in gone]:
        assert re.search(pattern, logs, re.MULTILINE), (pattern, logs[-3000:])
    assert len(scheduled_nodes(cluster, ns)) == 2  # kube-scheduler spread the replicas
    return ended


def scheduled_nodes(cluster: NodeCluster, ns: str) -> set[str]:
    """The nodes kube-scheduler bound the namespace's pods to (its events outlive the pods a
    cleanPodPolicy deleted)."""
    events = cluster.cp.rest.get(f"/api/v1/namespaces/{ns}/events")["items"]
    said = [e.get("message") or "" for e in events if e.get("reason") == "Scheduled"]
    return {m.rsplit(" ", 1)[-1] for m in said if " to " in m}


def test_the_pytorch_ddp_example_trains_through_the_operator(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, tmp_path: Path, registry: Any
) -> None:
    run_example("examples/pytorch/ddp.yaml", node_cluster, ns, kubeconfig, tmp_path, registry)


def test_a_replica_exiting_137_is_re_created_under_the_exit_code_policy(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, tmp_path: Path, registry: Any
) -> None:
    # The example's marker must outlive the failed pod: this machine's disk, as a volume would.
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"FLAKY_MARKER_DIR": str(markers)}
    first_run = ("rank=1 failing once with exit code 137",)  # its pod was deleted, with its log
    job = run_example("examples/exitcode/retry.yaml", node_cluster, ns, kubeconfig, tmp_path,
                      registry, env, gone=first_run)  # fmt: skip
    events = node_cluster.cp.rest.get(f"/api/v1/namespaces/{ns}/events")["items"]
    said = {(e["reason"], e["message"]) for e in events}
    assert any(reason.endswith("Restarting") for reason, _ in said), said
    assert any("exited with code 137" in message for _, message in said), said
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1


def test_the_mpi_example_reaches_its_workers_through_kubexec_and_kubectl_exec(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, tmp_path: Path, registry: Any
) -> None:
    # The launcher's kubectl-delivery init container waits for the workers with kubectl and its
    # ServiceAccount token; mpirun's rsh agent, upstream's kubexec.sh, starts a daemon in each
    # worker with `kubectl exec`; every rank's output comes back to the launcher.
    run_example("examples/mpi/logreg.yaml", node_cluster, ns, kubeconfig, tmp_path, registry)
    launcher = kubectl(kubeconfig, "logs", "mpi-logreg-launcher")
    assert re.search(r"^accuracy=0\.9\d+", launcher, re.MULTILINE), launcher[-3000:]
    # kubexec.sh's trace (set -x): the shell writes a traced line a word at a time and mpirun
    # runs one kubexec.sh per worker at once, so their lines may interleave; each word stays whole
    for worker in ("mpi-logreg-worker-0", "mpi-logreg-worker-1"):
        assert f"POD_NAME={worker}" in launcher, launcher[-3000:]
    assert launcher.count("/opt/kube/kubectl") >= 2, launcher[-3000:]
    delivery = kubectl(kubeconfig, "logs", "mpi-logreg-launcher", "-c", "kubectl-delivery")
    assert "all workers are running: mpi-logreg-worker-0, mpi-logreg-worker-1" in delivery


def test_the_mpi_trainjob_example_runs_on_the_launcher_pattern_over_kubectl_exec(
    node_cluster: NodeCluster, ns: str, kubeconfig: Path, registry: Any
) -> None:
    # Trainer's mpi policy on trainop's mpi-distributed runtime: the same launcher, kubexec.sh
    # and kubectl-delivery as MPIJob v1, the nodes hosting the ranks.
    from clusters import running_operator

    example = "examples/mpi/logreg-trainjob.yaml"
    expected = expectations.EXAMPLES[example]
    K8s(node_cluster.cp, ns, registry, None).install_trainer()  # type: ignore[arg-type]  # no stand-in
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/mpi-logreg-trainjob"

    def ended() -> str:
        conditions = node_cluster.cp.rest.get(path).get("status", {}).get("conditions") or []
        true = [c["type"] for c in conditions if c["status"] == "True"]
        return next((c for c in true if c in ("Complete", "Failed")), "")

    options = fast_operator_options(ns, enable_schemes=("TrainJob",))
    with running_operator(node_cluster.cp, registry, options):
        kubectl(kubeconfig, "apply", "-f", str(ROOT / example))  # the kubeconfig's namespace
        outcome = wait_for(ended, expected["timeout_s"] * 2, 0.5)
    launcher = kubectl(kubeconfig, "logs", "mpi-logreg-trainjob-launcher")
    assert outcome == "Complete", launcher[-3000:]
    for pattern in expected["must_match"]:
        assert re.search(pattern, launcher, re.MULTILINE), (pattern, launcher[-3000:])
    assert "POD_NAME=mpi-logreg-trainjob-node-1" in launcher, launcher[-3000:]  # kubexec.sh's trace
    assert "/opt/kube/kubectl" in launcher, launcher[-3000:]
    assert len(scheduled_nodes(node_cluster, ns)) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "example",
    ["examples/tensorflow/mwms.yaml", "examples/paddle/collective.yaml",
     "examples/xgboost/dist.yaml", "examples/jax/logreg.yaml"],
    ids=["tensorflow mwms trains", "paddle trains", "xgboost trains", "jax trains"],
)  # fmt: skip
def test_more_examples_train_through_the_operator(
    example: str,
    node_cluster: NodeCluster,
    ns: str,
    kubeconfig: Path,
    tmp_path: Path,
    registry: Any,
) -> None:
    run_example(example, node_cluster, ns, kubeconfig, tmp_path, registry)
