"""Invalid jobs, one per row: each is rejected with the right field path and a clear message.

Every row goes through `prepare_all`, the path a file takes from `trainop validate` or a backend;
a row passes only if the call raises InvalidJobError (never another exception) carrying a problem
at `path` whose message contains `fragment`.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from builders import JobBuilder, make_job, minimal_job

from trainop_core.api.validation import prepare_all
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import KindRegistry

PT_WORKER = "spec.pytorchReplicaSpecs.Worker"
PT_C0 = f"{PT_WORKER}.template.spec.containers[0]"


def pt() -> JobBuilder:
    return minimal_job("PyTorchJob")


def row(case: str, source: JobBuilder | str, path: str, fragment: str) -> Any:
    return pytest.param(source, path, fragment, id=case)


ROWS = [
    row("text that is not YAML", "kind: [PyTorchJob\n", "", "not valid YAML or JSON"),
    row("a file that does not exist", "no-such-job.yaml", "", "no such file"),
    row("a list at the top level", "- kind: TFJob\n- kind: TFJob\n", "", "got a list"),
    row(
        "a document that is a bare word",
        "--- hello\n",
        "",
        'expected a mapping with apiVersion, kind, metadata and spec, got "hello"',
    ),
    row(
        "an unknown kind",
        minimal_job("TFJob").set("kind", "Foo"),
        "kind",
        'unknown kind "Foo"; expected one of TFJob',
    ),
    row(
        "a kind in the wrong case",
        pt().set("kind", "pytorchjob"),
        "kind",
        'case-sensitive: did you mean "PyTorchJob"',
    ),
    row("no kind", pt().drop("kind"), "kind", "required field is missing"),
    row(
        "the wrong apiVersion",
        pt().set("apiVersion", "kubeflow.org/v2"),
        "apiVersion",
        'expected "kubeflow.org/v1", got "kubeflow.org/v2"',
    ),
    row("no name", pt().name(None), "metadata.name", "required field is missing"),
    row(
        "an uppercase name", pt().name("Mnist"), "metadata.name", '"Mnist" is not a valid DNS label'
    ),
    row(
        "a name with an underscore",
        pt().name("my_job"),
        "metadata.name",
        "is not a valid DNS label",
    ),
    row(
        "a name over 63 characters",
        pt().name("a" * 64),
        "metadata.name",
        "must be at most 63 characters",
    ),
    row(
        "a name too long for its pod names", pt().name("a" * 56), "metadata.name", 'pod name "aaaa'
    ),
    row(
        "a namespace that is not a DNS label",
        pt().namespace("Team_A"),
        "metadata.namespace",
        "is not a valid DNS label",
    ),
    row(
        "an unknown metadata field",
        pt().set("metadata.nmae", "x"),
        "metadata.nmae",
        "unknown field",
    ),
    row("an unknown spec field", pt().spec(replicas=2), "spec.replicas", "unknown field"),
    row(
        "a Python name instead of the wire name",
        pt().spec(run_policy={}),
        "spec.run_policy",
        'did you mean "runPolicy"',
    ),
    row("no spec", pt().drop("spec"), "spec", "required field is missing"),
    row(
        "an empty replica-spec map",
        make_job("PyTorchJob"),
        "spec.pytorchReplicaSpecs",
        "must have at least one replica type",
    ),
    row(
        "an unknown pod field",
        pt().container("Worker", imagee="x"),
        f"{PT_C0}.imagee",
        'unknown field (did you mean "image"?)',
    ),
    row(
        "a container without an image",
        pt().container("Worker", image=None),
        f"{PT_C0}.image",
        "required field is missing",
    ),
    row(
        "no container named pytorch",
        pt().container("Worker", name="main"),
        f"{PT_WORKER}.template.spec.containers",
        'no container named "pytorch"',
    ),
    row(
        "a replica without containers",
        pt().set(f"{PT_WORKER}.template", {}),
        f"{PT_WORKER}.template.spec.containers",
        "must have at least one container",
    ),
    row(
        "a template that is a list",
        pt().set(f"{PT_WORKER}.template", []),
        f"{PT_WORKER}.template",
        "expected a mapping, got a list",
    ),
    row(
        "an env entry without a name",
        pt().container("Worker", env=[{"value": "1"}]),
        f"{PT_C0}.env[0].name",
        "required field is missing",
    ),
    row(
        "a containerPort that is a word",
        pt().container("Worker", ports=[{"containerPort": "abc"}]),
        f"{PT_C0}.ports[0].containerPort",
        'expected an integer, got "abc"',
    ),
    row(
        "a memory limit that is not a quantity",
        pt().container("Worker", resources={"limits": {"memory": "4 GB"}}),
        f"{PT_C0}.resources.limits.memory",
        "expected a quantity",
    ),
    row(
        "a restartPolicy that does not exist",
        pt().set(f"{PT_WORKER}.restartPolicy", "Sometimes"),
        f"{PT_WORKER}.restartPolicy",
        "expected one of Always, OnFailure, Never, ExitCode",
    ),
    row(
        "replicas given as a string",
        pt().set(f"{PT_WORKER}.replicas", "2"),
        f"{PT_WORKER}.replicas",
        'expected an integer, got "2"',
    ),
    row(
        "a negative replica count",
        pt().set(f"{PT_WORKER}.replicas", -1),
        f"{PT_WORKER}.replicas",
        "expected an integer >= 0, got -1",
    ),
    row(
        "a negative backoffLimit",
        pt().run_policy(backoffLimit=-1),
        "spec.runPolicy.backoffLimit",
        "expected an integer >= 0, got -1",
    ),
    row(
        "a cleanPodPolicy that does not exist",
        pt().run_policy(cleanPodPolicy="Sometimes"),
        "spec.runPolicy.cleanPodPolicy",
        'expected one of All, Running, None, got "Sometimes"',
    ),
    row(
        "a managedBy nobody implements",
        pt().run_policy(managedBy="me/operator"),
        "spec.runPolicy.managedBy",
        "expected one of kubeflow.org/training-operator, kueue.x-k8s.io/multikueue",
    ),
    row(
        "suspend given as a word",
        pt().run_policy(suspend="yes"),
        "spec.runPolicy.suspend",
        'expected true or false, got "yes"',
    ),
    row(
        "a gang size that is a word",
        pt().run_policy(schedulingPolicy={"minAvailable": "all"}),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "expected an integer",
    ),
    row(
        "a replica type PyTorch does not have",
        pt().chief(),
        "spec.pytorchReplicaSpecs.Chief",
        "unknown replica type for PyTorchJob; expected one of Master, Worker",
    ),
    row(
        "one replica type spelt twice",
        pt().workers().replica("worker"),
        "spec.pytorchReplicaSpecs.worker",
        "duplicates Worker",
    ),
    row(
        "two PyTorch masters",
        pt().master(2),
        "spec.pytorchReplicaSpecs.Master.replicas",
        "must be 1",
    ),
    row(
        "a PyTorch nprocPerNode that is not a count",
        pt().spec(nprocPerNode="many"),
        "spec.nprocPerNode",
        "auto, cpu, gpu or an integer",
    ),
    row(
        "a TFJob with a Chief and a Master",
        make_job("TFJob").chief().master().workers(),
        "spec.tfReplicaSpecs",
        "more than 1 Chief or Master",
    ),
    row(
        "a TF successPolicy that does not exist",
        minimal_job("TFJob").spec(successPolicy="AnyWorker"),
        "spec.successPolicy",
        'expected one of "", AllWorkers',
    ),
    row(
        "an XGBoostJob without a Master",
        make_job("XGBoostJob").workers(2),
        "spec.xgbReplicaSpecs.Master",
        "is required",
    ),
    row(
        "an MXJob with two Schedulers",
        make_job("MXJob").scheduler(2).servers().workers(),
        "spec.mxReplicaSpecs.Scheduler.replicas",
        "must not be more than 1",
    ),
    row(
        "an MXJob jobMode that does not exist",
        minimal_job("MXJob").spec(jobMode="MXServe"),
        "spec.jobMode",
        "expected one of MXTrain, MXTune",
    ),
]


def _source(source: JobBuilder | str) -> Any:
    return source if isinstance(source, str) else source.build()


@pytest.mark.parametrize(("source", "path", "fragment"), ROWS)
def test_an_invalid_job_is_rejected_with_its_field_path(
    registry: KindRegistry, source: JobBuilder | str, path: str, fragment: str
) -> None:
    with pytest.raises(InvalidJobError) as caught:
        prepare_all(_source(source), registry=registry)
    messages = [p.message for p in caught.value.problems if p.path == path]
    assert any(fragment in m for m in messages), caught.value.problems


def test_the_table_has_at_least_thirty_rows() -> None:
    assert len(ROWS) >= 30


def test_one_bad_document_in_a_file_is_reported_with_its_index(
    tmp_path: Any, registry: KindRegistry
) -> None:
    docs = [
        minimal_job("TFJob", "a").build(),
        pt().name("Bad").build(),
        minimal_job("TFJob").build(),
    ]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    with pytest.raises(InvalidJobError) as caught:
        prepare_all(path, registry=registry)
    assert (caught.value.source, caught.value.job) == (f"{path} (document 2)", "PyTorchJob/Bad")


def test_all_problems_of_a_file_are_reported_at_once(tmp_path: Any, registry: KindRegistry) -> None:
    shape = pt().container("Worker", imagee="x").run_policy(backoffLimit=-1).name("Bad")
    rules = make_job("XGBoostJob", "Bad2").workers().container("Worker", image=None)
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([shape.build(), rules.build()]))
    with pytest.raises(InvalidJobError) as caught:
        prepare_all(path, registry=registry)
    assert sorted((p.path for p in caught.value.problems), key=str) == sorted(
        [
            f"{PT_C0}.imagee",
            "spec.runPolicy.backoffLimit",
            "metadata.name",  # reported with the shape problems, though the model was not built
            "metadata.name",
            "spec.xgbReplicaSpecs.Worker.template.spec.containers[0].image",
            "spec.xgbReplicaSpecs.Master",
        ]
    )
