"""Runtimes stored through trainop's Trainer CRDs on the real kube-apiserver keep what a runtime
needs: the default runtimes the examples run on, and a Trainer-shaped runtime using the
batch/v1 JobSpec, pod and PVC fields Trainer's runtimes use, read back as written apart from
the defaults Trainer's CRDs add (data/trainer-v2.3-*-facts.yaml); what Trainer's CRDs prune
(an unknown field of the JobSpec) is pruned here too."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s import K8s

from trainop_core.runtimes.crds import trainer_crds

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "core" / "data"
RUNTIMES = ROOT / "operator" / "trainer" / "runtimes"
TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"


def defaulted_paths() -> set[str]:
    """Every runtime field path where Trainer's CRDs set a default."""
    own = yaml.safe_load((DATA / "trainer-v2.3-crd-facts.yaml").read_text())["kinds"]
    kube = yaml.safe_load((DATA / "trainer-v2.3-k8s-facts.yaml").read_text())["kinds"]
    fields = own["TrainingRuntime"]["fields"] | kube["TrainingRuntime"]
    return {path for path, facts in fields.items() if "default" in facts}


def differences(written: Any, stored: Any, path: str) -> Iterator[tuple[str, str]]:
    """(what, path) wherever `stored` is not `written`: pruned, changed or added."""
    if isinstance(written, dict) and isinstance(stored, dict):
        for key in written.keys() | stored.keys():
            sub = f"{path}.{key}" if path else key
            if key not in stored:
                yield "pruned", sub
            elif key not in written:
                yield "added", sub
            else:
                yield from differences(written[key], stored[key], sub)
    elif isinstance(written, list) and isinstance(stored, list) and len(written) == len(stored):
        for one, other in zip(written, stored, strict=True):
            yield from differences(one, other, f"{path}[]")
    elif written != stored:
        yield "changed", path


def examples_runtimes() -> list[str]:
    names = set()
    for example in sorted((ROOT / "examples").glob("*/*.yaml")):
        for doc in yaml.safe_load_all(example.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "TrainJob":
                names.add(doc["spec"]["runtimeRef"]["name"])
    return sorted(names)


def trainer_shaped() -> dict[str, Any]:
    """A runtime using the JobSpec, pod and PVC fields Trainer's own runtimes and docs use."""
    node = {
        "name": "node",
        "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        "command": ["torchrun", "train.py"],
        "ports": [{"containerPort": 29500, "name": "c10d"}],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "8Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "livenessProbe": {"tcpSocket": {"port": "c10d"}, "periodSeconds": 10},
    }
    pod = {
        "metadata": {"labels": {"team": "vision"}},
        "spec": {
            "containers": [node],
            "restartPolicy": "OnFailure",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "nodeSelector": {"accelerator": "a100"},
        },
    }
    job = {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 3,
            "completionMode": "Indexed",
            "podFailurePolicy": {
                "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
            },
            "template": pod,
        },
    }
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "trainer-shaped"},
        "spec": {
            "mlPolicy": {"numNodes": 2, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": "node", "replicas": 1, "template": job}],
                    "volumeClaimPolicies": [{"templates": [claim]}],
                }
            },
        },
    }


def as_namespaced(name: str) -> dict[str, Any]:
    runtime: dict[str, Any] = yaml.safe_load((RUNTIMES / f"{name}.yaml").read_text())
    runtime["kind"] = "TrainingRuntime"  # the same schema as the cluster-scoped one
    return runtime


@pytest.fixture
def trainer(k8s: K8s) -> K8s:
    k8s.control_plane.install_crds(trainer_crds())
    return k8s


def store(k8s: K8s, runtime: dict[str, Any]) -> dict[str, Any]:
    path = f"{TRAINER}/namespaces/{k8s.namespace}/trainingruntimes"
    stored: dict[str, Any] = k8s.rest.create(path, copy.deepcopy(runtime))
    return stored


def test_the_examples_run_on_the_default_runtimes() -> None:
    assert examples_runtimes(), "no example TrainJob found"
    assert set(examples_runtimes()) <= {path.stem for path in RUNTIMES.glob("*.yaml")}


def test_runtimes_are_stored_as_written_but_for_trainers_defaults(trainer: K8s) -> None:
    runtimes = [as_namespaced(name) for name in examples_runtimes()] + [trainer_shaped()]
    allowed = defaulted_paths()
    for runtime in runtimes:
        stored = store(trainer, runtime)
        found = set(differences(runtime["spec"], stored["spec"], "spec"))
        unexpected = {(what, p) for what, p in found if what != "added" or p not in allowed}
        assert not unexpected, (runtime["metadata"]["name"], sorted(unexpected))


def test_the_job_spec_is_pruned_and_defaulted_as_trainers_crd_has_it(trainer: K8s) -> None:
    runtime = trainer_shaped()
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["notAJobField"] = True
    stored = store(trainer, runtime)
    job = stored["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert "notAJobField" not in job
    [port] = job["template"]["spec"]["containers"][0]["ports"]
    assert port == {"containerPort": 29500, "name": "c10d", "protocol": "TCP"}
