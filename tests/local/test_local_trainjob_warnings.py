"""What a process backend ignores in a TrainJob (env it cannot resolve, containers it does not
run) is said with the TrainJob's own fields or its runtime's, never the planned job's
`spec.replicaSpecs...` that its user never wrote: on this machine (an event) and for Ray (the
same messages: `job_warnings` is what both backends say)."""

from __future__ import annotations

import sys
from typing import Any

import yaml
from builders import make_trainjob

from trainop_core.api.load import Document
from trainop_core.backends.process.podspec import LOCAL_RUNS_ON, job_warnings
from trainop_core.client import TrainingClient, job_state
from trainop_core.runtimes.catalog import DEFAULTS_DIR
from trainop_core.runtimes.prepare import prepare_trainjob

SECRET = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
QUICK = [sys.executable, "-c", "pass"]


def trainjob(**trainer: Any) -> dict[str, Any]:
    env = [{"name": "PLAIN", "value": "1"}, SECRET]
    return make_trainjob("tj", trainer={"command": QUICK, "env": env, **trainer})


def test_warnings_name_the_trainjobs_fields_and_the_runtimes(tmp_path: Any) -> None:
    runtime = yaml.safe_load((DEFAULTS_DIR / "torch-distributed.yaml").read_text())
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"].append({"name": "sidecar", "image": "side:1", "command": ["true"]})
    runtime["metadata"]["name"] = "with-sidecar"
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(runtime))
    job = trainjob()
    job["spec"]["runtimeRef"]["name"] = "with-sidecar"
    kind, planned = prepare_trainjob(Document(job, ""), tmp_path)
    specs = planned.to_dict()["spec"][kind.replica_field]
    messages = job_warnings(planned, specs, kind, LOCAL_RUNS_ON)
    text = "\n".join(messages)
    assert "replicaSpecs" not in text, text
    assert "skipped: spec.trainer.env[1] (TOKEN)" in text
    assert (
        "not run: ClusterTrainingRuntime/with-sidecar spec.template.spec.replicatedJobs[0]"
        ".template.spec.template.spec.containers[1] (sidecar)"
    ) in text


def test_a_v1_jobs_warnings_keep_its_own_paths() -> None:
    from builders import make_job

    from trainop_core.api.validation import prepare

    job = make_job("PyTorchJob", "p").master(command=QUICK).build()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"] = [
        SECRET
    ]
    kind, model = prepare(job)
    specs = model.to_dict()["spec"][kind.replica_field]
    (_, skipped) = job_warnings(model, specs, kind, LOCAL_RUNS_ON)
    assert skipped.endswith(
        "skipped: spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[0] (TOKEN)"
    )


def test_the_local_backends_event_names_the_trainjobs_env_entry(client: TrainingClient) -> None:
    created = client.create(trainjob(numNodes=1))
    assert job_state(client.wait(created.name, created.namespace, timeout=120)) == "Succeeded"
    said = [e.message for e in client.events("tj") if e.reason == "LocalBackend"]
    assert any("skipped: spec.trainer.env[1] (TOKEN)" in m for m in said), said
    assert not any("replicaSpecs" in m for m in said), said
