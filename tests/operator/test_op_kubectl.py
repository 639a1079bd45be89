"""The operator driven with kubectl against the real kube-apiserver, the verbs people use daily:
create namespace, apply (client-side, with the server's OpenAPI validation, and server-side),
get -w, describe, logs (served by the kubelet stand-in), scale, and delete --wait."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from k8s import delete_namespace, namespace_name
from opkit import ROOT, Cluster, RunningOperator, wait_for

from trainop_core.crds import all_crds
from trainop_core.testing.kubelet import Kubelet, Rule

EXAMPLE = ROOT / "examples" / "pytorch" / "ddp.yaml"
LOG = "epoch 1 loss=0.9\nepoch 2 loss=0.4\n"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")


def kubectl(cluster: Cluster, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace made with `kubectl create namespace` (kubectl sends it as protobuf)."""
    name = namespace_name("kubectl")
    assert kubectl(cluster, "create", "namespace", name) == f"namespace/{name} created\n"
    yield name
    delete_namespace(cluster.control_plane, name)


def example_in(namespace: str, tmp_path: Path) -> tuple[Path, str]:
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["namespace"] = namespace
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path, job["metadata"]["name"]


def test_kubectl_runs_an_example_job_from_apply_to_delete(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    crds = tmp_path / "crds.yaml"
    crds.write_text(yaml.safe_dump_all(all_crds(cluster.registry)))
    # As the README says: `trainop crds | kubectl apply --server-side -f -` (already there: kept)
    applied = kubectl(cluster, "apply", "--server-side", "-f", str(crds))
    assert applied.count("serverside-applied") == len(cluster.registry.kinds)
    path, name = example_in(namespace, tmp_path)
    with (
        Kubelet(cluster.control_plane, [Rule("*", run_seconds=None, log=LOG)], namespace=namespace)
        as kubelet,
        Watch(cluster, "get", "pytorchjobs", "-n", namespace, "-w") as watch,
    ):  # fmt: skip
        operator = RunningOperator(cluster, namespace=namespace, enable_schemes=("PyTorchJob",))
        try:
            assert f"pytorchjob.kubeflow.org/{name} created" in kubectl(
                cluster,
                "apply",
                "-f",
                str(path),  # validated against the server's OpenAPI
            )
            pods = [f"{name}-master-0", f"{name}-worker-0", f"{name}-worker-1"]
            wait_for(lambda: _phases(cluster, namespace) == ["Running"] * 3, what="running")
            assert kubectl(cluster, "logs", "-n", namespace, pods[0]) == LOG
            for pod in pods:
                kubelet.terminate(namespace, pod, exit_code=0)
            cluster.wait_condition("PyTorchJob", name, "Succeeded", namespace=namespace)
            _check_watch(watch, name)
            _check_describe(kubectl(cluster, "describe", "pytorchjob", name, "-n", namespace))
            listed = kubectl(cluster, "get", "pods", "-n", namespace, "-o", "name")
            assert sorted(listed.split()) == [f"pod/{p}" for p in pods]
            state = kubectl(cluster, "get", "pytorchjob", name, "-n", namespace,
                            "-o", "jsonpath={.status.conditions[-1:].type}")  # fmt: skip
            assert state == "Succeeded"
            _server_side_apply_and_scale(cluster, namespace, path, name)
            # Foreground: kubectl returns once the job is gone, which is after its pods are.
            kubectl(cluster, "delete", "-f", str(path), "--cascade=foreground", "--wait")
            assert kubectl(cluster, "get", "pods,pytorchjobs", "-n", namespace, "-o", "name") == ""
        finally:
            operator.stop()


def _phases(cluster: Cluster, namespace: str) -> list[str]:
    return [p.status.phase for p in cluster.core.list_namespaced_pod(namespace).items]


def _check_watch(watch: Watch, name: str) -> None:
    """`kubectl get -w` printed the job's rows as its State column changed."""
    lines = watch.read_until(lambda line: name in line and "Succeeded" in line)
    assert lines[0].split()[:2] == ["NAME", "STATE"]
    states = [line.split()[1] for line in lines[1:] if line.split()[0] == name]
    assert states[-1] == "Succeeded" and "Running" in states, lines


def _check_describe(text: str) -> None:
    """`kubectl describe` shows the spec, the conditions and the operator's events."""
    assert "Kind:         PyTorchJob" in text and "Pytorch Replica Specs:" in text
    assert "Reason:                PyTorchJobSucceeded" in text
    events = text[text.index("Events:") :]
    assert events.count("SuccessfulCreatePod") == 1, events  # one event for the batch of three
    assert "Created 3 pods:" in events, events
    assert "PyTorchJobSucceeded" in events and "pytorchjob-controller" in events, events


def _server_side_apply_and_scale(cluster: Cluster, namespace: str, path: Path, name: str) -> None:
    job = yaml.safe_load(path.read_text())
    job["metadata"]["labels"] = {"team": "vision"}
    path.write_text(yaml.safe_dump(job))
    out = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    assert f"pytorchjob.kubeflow.org/{name} serverside-applied" in out
    assert kubectl(cluster, "get", "pytorchjob", name, "-n", namespace,
                   "-o", "jsonpath={.metadata.labels.team}") == "vision"  # fmt: skip
    kubectl(cluster, "scale", "pytorchjob", name, "-n", namespace, "--replicas=3")
    replicas = kubectl(cluster, "get", "pytorchjob", name, "-n", namespace,
                       "-o", "jsonpath={.spec.pytorchReplicaSpecs.Worker.replicas}")  # fmt: skip
    assert replicas == "3"


def test_the_server_validates_a_job_kubectl_applies(cluster: Cluster, tmp_path: Path) -> None:
    """The CRD's structural schema: a string where an integer belongs is refused, naming it."""
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["namespace"] = cluster.namespace
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), "apply", "--validate=false",
         "-f", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in done.stderr
    assert "must be of type integer" in done.stderr


class Watch:
    """A `kubectl ARGS` that keeps running (``get -w``): read some lines, then stop it."""

    def __init__(self, cluster: Cluster, *args: str) -> None:
        self.argv = ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args]
        self.lines: list[str] = []
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> Watch:
        self._process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return self

    def read_until(self, done: object, timeout: float = 60) -> list[str]:
        assert self._process is not None and self._process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._process.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if callable(done) and done(line):
                return self.lines
        raise AssertionError(f"kubectl {self.argv[3:]} printed only {self.lines}")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
