"""The TrainJob examples applied with kubectl train through the operator (--enable-scheme
TrainJob, trainop's ClusterTrainingRuntimes installed) on process nodes: the runtime's ML policy
env reaches real torchrun, XGBoost and JAX processes spread over both nodes, the job ends
Complete, and each example's lines (its accuracy among them) are read back with `kubectl logs`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s import K8s, fast_operator_options
from nodekit import NodeCluster, expectations

from trainop_core.testing.builders import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def trainer_operator(node_cluster: NodeCluster, ns: str, registry: Any) -> Iterator[None]:
    """Trainer's CRDs and trainop's runtimes on the cluster, the operator running TrainJobs."""
    from clusters import running_operator

    K8s(node_cluster.cp, ns, registry, None).install_trainer()  # type: ignore[arg-type]  # no stand-in
    with running_operator(
        node_cluster.cp, registry, fast_operator_options(ns, enable_schemes=("TrainJob",))
    ):
        yield


def ended(cluster: NodeCluster, ns: str, name: str) -> str:
    """The TrainJob's end ("Complete" or "Failed"), or "" while it runs."""
    job = cluster.cp.rest.get(f"{TRAINJOBS.format(ns=ns)}/{name}")
    conditions = job.get("status", {}).get("conditions") or []
    true = [c["type"] for c in conditions if c["status"] == "True"]
    return next((c for c in true if c in ("Complete", "Failed")), "")


def kubectl_logs(kubeconfig: Path) -> str:
    """Every pod's log in the namespace, read through kube-apiserver from the nodes."""
    pods = kubectl(kubeconfig, "get", "pods", "-o", "name").split()
    return "\n".join(kubectl(kubeconfig, "logs", pod) for pod in pods)


@pytest.mark.usefixtures("trainer_operator")
@pytest.mark.parametrize(
    "example",
    [
        "examples/pytorch/ddp-trainjob.yaml",
        pytest.param("examples/xgboost/dist-trainjob.yaml", marks=pytest.mark.slow),
        pytest.param("examples/jax/logreg-trainjob.yaml", marks=pytest.mark.slow),
    ],
    ids=["a torchrun trainjob trains", "an xgboost trainjob trains", "a jax trainjob trains"],
)
def test_the_trainjob_examples_train_through_the_operator(
    example: str, node_cluster: NodeCluster, ns: str, kubeconfig: Path
) -> None:
    expected = expectations.EXAMPLES[example]
    job = yaml.safe_load((ROOT / example).read_text())
    name = job["metadata"]["name"]
    kubectl(kubeconfig, "apply", "-f", str(ROOT / example))  # the namespace: the kubeconfig's

    outcome = wait_for(lambda: ended(node_cluster, ns, name), expected["timeout_s"] * 2, 0.5)
    logs = kubectl_logs(kubeconfig)
    pods = node_cluster.cp.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    stored = node_cluster.cp.rest.get(f"{TRAINJOBS.format(ns=ns)}/{name}")
    states = {p["metadata"]["name"]: p["status"].get("containerStatuses") for p in pods}
    assert outcome == "Complete", json.dumps([stored.get("status"), states]) + logs[-3000:]
    for pattern in expected["must_match"]:
        assert re.search(pattern, logs, re.MULTILINE), (pattern, logs[-3000:])
    assert len(pods) == sum(expected["replicas"].values())
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # spread over both nodes
