"""Training progress on the operator, on the real kube-apiserver: what the primary pod prints (the
kubelet stand-in serves it through pods/log, as a kubelet serves a container's log) becomes a v1
job's `trainop.dev/trainer-status` annotation and a TrainJob's `status.trainerStatus`, at most one
write per interval; hostile output is dropped and counted; the unmodified `kubeflow-training`
SDK, the Kubeflow Trainer SDK and kubectl still read the jobs."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import pytest
from builders import make_job, make_trainjob
from k8s import K8s

from trainop_core.progress import ANNOTATION
from trainop_core.report import PROGRESS
from trainop_core.testing.builders import wait_for
from trainop_core.testing.kubelet import Rule

INTERVAL = 0.5
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"


def annotated(k8s: K8s, plural: str, name: str) -> dict[str, Any]:
    job = k8s.rest.get(k8s.job_path(plural, name))
    text = (job["metadata"].get("annotations") or {}).get(ANNOTATION)
    return json.loads(text) if text else {}


def trainer_status(k8s: K8s, name: str) -> dict[str, Any]:
    job = k8s.rest.get(TRAINJOBS.format(ns=k8s.namespace) + f"/{name}")
    return dict((job.get("status") or {}).get("trainerStatus") or {})


def conditions(k8s: K8s, path: str) -> dict[str, str]:
    job = k8s.rest.get(path)
    return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}


def counter(manager: Any, name: str, **labels: str) -> float:
    return float(getattr(manager.metrics, name).value(**labels))


def until(check: Any, timeout: float) -> Any:
    return wait_for(check, timeout, 0.1)


def say(k8s: K8s, pod: str, text: str, container: str = "pytorch") -> None:
    k8s.kubelet.append_log(k8s.namespace, pod, text, container)


def test_a_v1_jobs_primary_pod_reports_its_progress_into_the_annotation_at_a_bounded_rate(
    k8s: K8s,
) -> None:
    k8s.kubelet.rules[:] = [
        Rule("prog-master-*", run_seconds=None, log="loss=0.9 progressPercentage=10\n"),
        Rule("prog-*", run_seconds=None, log="progressPercentage=99 loss=7\n"),
    ]
    job = make_job("PyTorchJob", "prog").master().workers(1).build()
    with k8s.operator(progress_interval=INTERVAL) as manager:
        started = time.monotonic()
        k8s.rest.create(k8s.job_path("pytorchjobs"), job)
        until(lambda: annotated(k8s, "pytorchjobs", "prog").get("progressPercentage"), 60)
        first = annotated(k8s, "pytorchjobs", "prog")
        assert first["progressPercentage"] == 10  # the master's: a worker's is not the job's
        assert first["metrics"] == [{"name": "loss", "value": "0.9"}]
        assert first["lastUpdatedTime"].endswith("Z")
        for step in range(1, 41):  # far more often than the interval
            line = f"loss={1 / step:.4f} progressPercentage={step} step={step}\n"
            say(k8s, "prog-master-0", line)
        until(lambda: annotated(k8s, "pytorchjobs", "prog").get("progressPercentage") == 40, 60)
        say(k8s, "prog-master-0", "loss=0.01 progressPercentage=100 estimatedRemainingSeconds=0\n")
        k8s.kubelet.terminate(k8s.namespace, "prog-master-0", 0)  # its last words are read
        k8s.kubelet.terminate(k8s.namespace, "prog-worker-0", 0)
        path = k8s.job_path("pytorchjobs", "prog")
        until(lambda: conditions(k8s, path).get("Succeeded") == "True", 60)
        until(lambda: annotated(k8s, "pytorchjobs", "prog").get("progressPercentage") == 100, 30)
        elapsed = time.monotonic() - started
        writes = counter(manager, "progress_writes", result="ok")
    final = annotated(k8s, "pytorchjobs", "prog")
    assert final["estimatedRemainingSeconds"] == 0
    assert {m["name"]: m["value"] for m in final["metrics"]} == {"loss": "0.01", "step": "40"}
    # Never once per line (42 were printed). At least the first report and the last; under load
    # the 40 lines and the last words can be read together, so 2 writes is right too.
    assert 2 <= writes <= elapsed / INTERVAL + 2


def test_a_trainjob_gets_trainers_trainer_status_and_keeps_it_through_its_status_writes(
    k8s: K8s,
) -> None:
    k8s.install_trainer()
    k8s.kubelet.rules[:] = [
        Rule("tjp-node-0", run_seconds=None, log=f"{PROGRESS}=50 estimatedRemainingSeconds=90\n"),
        Rule("tjp-*", run_seconds=None),
    ]
    body = make_trainjob("tjp", trainer={"numNodes": 2, "command": ["train"]})
    path = TRAINJOBS.format(ns=k8s.namespace)
    with k8s.operator(enable_schemes=("TrainJob",), progress_interval=INTERVAL):
        k8s.rest.create(path, body)
        until(lambda: trainer_status(k8s, "tjp").get("progressPercentage") == 50, 60)
        assert trainer_status(k8s, "tjp")["estimatedRemainingSeconds"] == 90
        say(k8s, "tjp-node-0", "progressPercentage=100 accuracy=0.97\n", "node")
        for node in ("tjp-node-0", "tjp-node-1"):
            k8s.kubelet.terminate(k8s.namespace, node, 0)
        until(lambda: conditions(k8s, f"{path}/tjp").get("Complete") == "True", 60)
        until(lambda: trainer_status(k8s, "tjp").get("progressPercentage") == 100, 30)
    status = trainer_status(k8s, "tjp")
    assert status["metrics"] == [{"name": "accuracy", "value": "0.97"}]
    assert "estimatedRemainingSeconds" not in status  # the last report of progress had none
    # Trainer's own field and shape, as Trainer's published API models read it
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient
    from kubeflow_trainer_api import models

    stored = k8s.rest.get(f"{path}/tjp")
    read = models.TrainerV1alpha1TrainJob.from_dict(stored).status.trainer_status
    assert (read.progress_percentage, read.estimated_remaining_seconds) == (100, None)
    assert [(m.name, m.value) for m in read.metrics] == [("accuracy", "0.97")]
    assert read.last_updated_time is not None
    assert {"conditions", "jobsStatus", "trainerStatus"} <= set(stored["status"])
    config = KubernetesBackendConfig(namespace=k8s.namespace, config_file=str(k8s.kubeconfig))
    assert TrainerClient(backend_config=config).get_job("tjp").status == "Complete"


def test_hostile_output_is_dropped_and_counted_and_the_valid_part_still_reported(
    k8s: K8s,
) -> None:
    hostile = "".join(
        [
            "loss=nan progressPercentage=150 acc=inf\n",
            "x" * 9000 + "=1\n",
            "v=1e999 estimatedRemainingSeconds=-4\n",
            *(f"noise {i} loss=0.{i % 10}\n" for i in range(3000)),  # a flood
            "loss=0.25 progressPercentage=30\n",
        ]
    )
    k8s.kubelet.rules[:] = [Rule("bad-*", run_seconds=None, log=hostile)]
    job = make_job("PyTorchJob", "bad").master().build()
    with k8s.operator(progress_interval=INTERVAL) as manager:
        k8s.rest.create(k8s.job_path("pytorchjobs"), job)
        until(lambda: annotated(k8s, "pytorchjobs", "bad").get("progressPercentage") == 30, 60)
        say(k8s, "bad-master-0", "loss=nan acc=0.5\n")
        until(lambda: len(annotated(k8s, "pytorchjobs", "bad").get("metrics") or []) == 2, 30)
        dropped = {r: counter(manager, "progress_dropped", reason=r) for r in ("not-finite",)}
        assert dropped["not-finite"] >= 1
    progress = annotated(k8s, "pytorchjobs", "bad")
    assert {m["name"]: m["value"] for m in progress["metrics"]} == {"loss": "0.25", "acc": "0.5"}
    events = k8s.rest.get(f"/api/v1/namespaces/{k8s.namespace}/events")["items"]
    warned = [e for e in events if e["reason"] == "ProgressDropped"]
    assert warned and all(e["involvedObject"]["name"] == "bad" for e in warned)


def test_a_job_that_prints_nothing_has_no_progress_and_its_pod_is_read_less_and_less(
    k8s: K8s,
) -> None:
    k8s.kubelet.rules[:] = [Rule("quiet-*", run_seconds=None, log="starting\nepoch 1 done\n")]
    job = make_job("PyTorchJob", "quiet").master().build()
    with k8s.operator(progress_interval=0.2) as manager:
        k8s.rest.create(k8s.job_path("pytorchjobs"), job)
        until(lambda: counter(manager, "progress_reads", result="ok") >= 3, 60)
        started, reads = time.monotonic(), counter(manager, "progress_reads", result="ok")
        until(lambda: time.monotonic() - started > 4, 10)  # the idle back-off at work
        later = counter(manager, "progress_reads", result="ok") - reads
        assert counter(manager, "progress_writes", result="ok") == 0
    assert annotated(k8s, "pytorchjobs", "quiet") == {}
    assert later <= 4  # 0.8, 1.6, 3.2 s apart: not 20 reads in 4 s


def test_the_unmodified_v1_sdk_and_kubectl_read_a_job_that_carries_progress(
    k8s: K8s, tmp_path: Any
) -> None:
    from kubeflow.training import TrainingClient

    k8s.kubelet.rules[:] = [Rule("sdk-*", run_seconds=0.5, log="progressPercentage=100 loss=0.1\n")]
    # runPolicy given: the v1 SDK's model refuses a job without one (as it reads any job)
    job = make_job("PyTorchJob", "sdk").master().workers(1).run_policy(cleanPodPolicy="None")
    job = job.build()
    with k8s.operator(progress_interval=INTERVAL):
        k8s.rest.create(k8s.job_path("pytorchjobs"), job)
        until(lambda: annotated(k8s, "pytorchjobs", "sdk").get("progressPercentage"), 60)
        path = k8s.job_path("pytorchjobs", "sdk")
        until(lambda: conditions(k8s, path).get("Succeeded") == "True", 60)
    kubeconfig = k8s.kubeconfig_here(tmp_path / "kc")
    client = TrainingClient(config_file=str(kubeconfig), namespace=k8s.namespace)
    read = client.get_job("sdk", job_kind="PyTorchJob")
    assert read.metadata.annotations[ANNOTATION]  # kept, not in its way
    assert client.is_job_succeeded("sdk", job_kind="PyTorchJob")
    assert [j.metadata.name for j in client.list_jobs(job_kind="PyTorchJob")] == ["sdk"]
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not on PATH")
    kubectl = ["kubectl", "--kubeconfig", str(kubeconfig)]
    table = subprocess.run([*kubectl, "get", "pytorchjobs"], capture_output=True, text=True)
    assert table.returncode == 0 and table.stdout.split()[:5] == [
        "NAME", "STATE", "AGE", "sdk", "Succeeded"
    ]  # fmt: skip
    jsonpath = "jsonpath={.metadata.annotations.trainop\\.dev/trainer-status}"
    shown = subprocess.run(
        [*kubectl, "get", "pytorchjob", "sdk", "-o", jsonpath], capture_output=True, text=True
    )
    assert json.loads(shown.stdout)["progressPercentage"] == 100
