"""`kubectl apply` of a shipped example job, with the project's CRDs, reaches Succeeded."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from opkit import ROOT, Cluster, RunningOperator

from trainop_core.crds import all_crds

Start = Callable[..., RunningOperator]
EXAMPLE = ROOT / "examples" / "pytorch" / "ddp.yaml"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")


def kubectl(cluster: Cluster, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/pytorch/ddp.yaml is not in the tree")
def test_kubectl_apply_of_an_example_job_succeeds(
    cluster: Cluster, run_operator: Start, tmp_path: Path
) -> None:
    crds = tmp_path / "crds.yaml"
    crds.write_text(yaml.safe_dump_all(all_crds(cluster.registry)))
    # The fake API server serves no /openapi documents, so kubectl's client-side validation is off.
    kubectl(cluster, "apply", "--validate=false", "-f", str(crds))
    run_operator(enable_schemes=("PyTorchJob",)).wait_started()
    job = yaml.safe_load(EXAMPLE.read_text())
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    cluster.namespace(namespace)  # kubectl sends built-in kinds as protobuf: not served here
    cluster.rule(f"{name}-*", run_seconds=0.3)
    assert "created" in kubectl(cluster, "apply", "--validate=false", "-f", str(EXAMPLE))
    cluster.wait_condition("PyTorchJob", name, "Succeeded", namespace=namespace)
    pods = kubectl(cluster, "get", "pods", "-n", namespace, "-o", "name")
    assert sorted(pods.split()) == [
        f"pod/{name}-master-0",
        f"pod/{name}-worker-0",
        f"pod/{name}-worker-1",
    ]
    state = kubectl(
        cluster,
        "get",
        "pytorchjob",
        name,
        "-n",
        namespace,
        "-o",
        "jsonpath={.status.conditions[-1:].type}",
    )
    assert state == "Succeeded"
