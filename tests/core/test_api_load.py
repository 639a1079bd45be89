"""Loading jobs from files, texts, dicts and models; strict shape errors; dumping back to YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import make_job, minimal_job

from trainop_core.api.load import (
    InvalidJobsError,
    dump_json,
    dump_yaml,
    load_job,
    load_jobs,
    parse_job,
)
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.mxnet import MXJob
from trainop_core.kinds.pytorch import PyTorchJob
from trainop_core.kinds.table import KindRegistry


def _stream(*docs: dict[str, object]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_a_file_path_loads_as_str_or_path(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"job{suffix}"
    path.write_text(json.dumps(minimal_job("PyTorchJob").build()))
    for source in (path, str(path)):
        [job] = load_jobs(source)
        assert isinstance(job, PyTorchJob)
        assert job.spec.replica_specs["Worker"].replicas == 1


def test_a_multi_document_stream_skips_empty_documents(registry: KindRegistry) -> None:
    text = "---\n" + _stream(
        minimal_job("TFJob", "a").build(), minimal_job("XGBoostJob", "b").build()
    )
    text += "---\n"
    jobs = load_jobs(text, registry=registry)
    assert [(j.kind, j.name) for j in jobs] == [("TFJob", "a"), ("XGBoostJob", "b")]


def test_a_dict_and_a_job_load_as_themselves(registry: KindRegistry) -> None:
    data = minimal_job("PyTorchJob").build()
    job = load_job(data, registry=registry)
    assert load_job(job, registry=registry) is job
    assert job.to_dict()["spec"]["pytorchReplicaSpecs"] == data["spec"]["pytorchReplicaSpecs"]


def test_the_mxnetjob_alias_is_stored_as_mxjob(registry: KindRegistry) -> None:
    job = load_job(minimal_job("MXNetJob").build(), registry=registry)
    assert isinstance(job, MXJob)
    assert job.kind == "MXJob"


def test_unquoted_yaml_timestamps_are_accepted(registry: KindRegistry) -> None:
    text = (
        minimal_job("PyTorchJob")
        .yaml()
        .replace("metadata:\n", "metadata:\n  creationTimestamp: 2024-01-02T03:04:05Z\n")
    )
    job = load_job(text, registry=registry)
    assert job.metadata.creation_timestamp is not None
    assert job.metadata.creation_timestamp.year == 2024


def test_every_pod_field_survives_a_load_dump_round_trip(registry: KindRegistry) -> None:
    volumes = [{"name": "d", "emptyDir": {}}]
    data = (
        minimal_job("PyTorchJob")
        .container("Worker", resources={"limits": {"cpu": 2}}, volumeMounts=[])
        .set("spec.pytorchReplicaSpecs.Worker.template.spec.volumes", volumes)
        .build()
    )
    job = load_job(data, registry=registry)
    assert yaml.safe_load(dump_yaml(job)) == data
    assert json.loads(dump_json(job)) == data


def test_dump_yaml_writes_what_a_user_would_write(registry: KindRegistry) -> None:
    job = load_job(minimal_job("XGBoostJob").build(), registry=registry)
    text = dump_yaml(job)
    assert list(yaml.safe_load(text)) == ["apiVersion", "kind", "metadata", "spec"]
    assert "null" not in text
    assert "runPolicy" not in text  # not written by the user, not invented by dumping


def test_dump_yaml_of_several_jobs_is_a_stream(registry: KindRegistry) -> None:
    jobs = [load_job(minimal_job(k).build(), registry=registry) for k in ("TFJob", "MXJob")]
    assert [d["kind"] for d in yaml.safe_load_all(dump_yaml(jobs))] == ["TFJob", "MXJob"]


def test_a_job_built_in_code_dumps_its_kind_and_api_version() -> None:
    job = PyTorchJob.model_validate({"spec": {"pytorchReplicaSpecs": {}}})
    head = yaml.safe_load(dump_yaml(job))
    assert (head["apiVersion"], head["kind"]) == ("kubeflow.org/v1", "PyTorchJob")


def _error(source: object, registry: KindRegistry) -> InvalidJobError:
    with pytest.raises(InvalidJobError) as caught:
        load_jobs(source, registry=registry)  # type: ignore[arg-type]  # bad input on purpose
    return caught.value


def test_every_shape_problem_of_a_document_is_reported_at_once(registry: KindRegistry) -> None:
    data = (
        make_job("PyTorchJob", "demo")
        .master()
        .workers("2")
        .container("Worker", imagee="x")
        .run_policy(cleanPodPolicy="Sometimes")
        .spec(bogus=1)
        .build()
    )
    err = _error(data, registry)
    assert err.job == "PyTorchJob/demo"
    assert {str(p) for p in err.problems} == {
        'spec.pytorchReplicaSpecs.Worker.replicas: expected an integer, got "2"',
        'spec.runPolicy.cleanPodPolicy: expected one of All, Running, None, got "Sometimes"',
        "spec.bogus: unknown field",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagee: "
        'unknown field (did you mean "image"?)',
    }


def test_python_field_names_are_not_wire_names(registry: KindRegistry) -> None:
    err = _error(minimal_job("PyTorchJob").run_policy(backoff_limit=3).build(), registry)
    assert [str(p) for p in err.problems] == [
        'spec.runPolicy.backoff_limit: unknown field (did you mean "backoffLimit"?)'
    ]


def test_a_file_error_names_the_file_and_the_job(tmp_path: Path, registry: KindRegistry) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(minimal_job("TFJob", "mnist").run_policy(suspend="no").yaml())
    err = _error(path, registry)
    assert (err.source, err.job) == (str(path), "TFJob/mnist")
    assert (
        str(err) == f'{path}: TFJob/mnist: spec.runPolicy.suspend: expected true or false, got "no"'
    )


def test_every_bad_document_of_a_stream_is_reported_with_its_index(
    tmp_path: Path, registry: KindRegistry
) -> None:
    good = minimal_job("TFJob", "good").build()
    bad1 = make_job("TFJob", "bad1").workers(-1).build()
    bad2 = make_job("TFJob", "bad2").workers().spec(x=1).build()
    path = tmp_path / "jobs.yaml"
    path.write_text(_stream(good, bad1, bad2))
    err = _error(path, registry)
    assert isinstance(err, InvalidJobsError)
    assert [(e.source, e.job) for e in err.errors] == [
        (f"{path} (document 2)", "TFJob/bad1"),
        (f"{path} (document 3)", "TFJob/bad2"),
    ]
    assert len(str(err).splitlines()) == 2


def test_load_job_wants_exactly_one_job(registry: KindRegistry) -> None:
    two = _stream(minimal_job("TFJob", "a").build(), minimal_job("TFJob", "b").build())
    with pytest.raises(InvalidJobError, match="expected exactly one job, found 2 jobs"):
        load_job(two, registry=registry)
    with pytest.raises(InvalidJobError, match="found no job"):
        load_job("---\n", registry=registry)


def test_parse_job_rejects_what_is_not_a_mapping(registry: KindRegistry) -> None:
    with pytest.raises(InvalidJobError, match=r"expected a mapping .*, got a list"):
        parse_job([1, 2], registry)


def test_a_wrong_api_version_is_reported_once(registry: KindRegistry) -> None:
    err = _error(minimal_job("TFJob").set("apiVersion", 1).build(), registry)
    assert [str(p) for p in err.problems] == ['apiVersion: expected "kubeflow.org/v1", got 1']


def test_a_status_is_dumped_when_present(registry: KindRegistry) -> None:
    created = {"type": "Created", "status": "True", "lastUpdateTime": "2024-01-02T03:04:05Z"}
    data = minimal_job("TFJob").set("status", {"conditions": [created]}).build()
    dumped = yaml.safe_load(dump_yaml(load_job(data, registry=registry)))
    assert list(dumped) == ["apiVersion", "kind", "metadata", "spec", "status"]
    assert dumped["status"]["conditions"] == [created]


def test_a_single_line_without_a_colon_is_taken_for_a_missing_file(registry: KindRegistry) -> None:
    err = _error("jobs/mnist", registry)
    assert (err.source, str(err.problems[0])) == ("jobs/mnist", "no such file")


def test_the_api_and_crd_modules_import_no_optional_dependency() -> None:
    import subprocess
    import sys

    code = (
        "import sys, trainop_core.api, trainop_core.crds, trainop_core.cli.validate_cmd, "
        "trainop_core.cli.crds_cmd; "
        "print(sorted(m for m in ('flytekit', 'kfp', 'ray', 'kubernetes') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_enum_values_print_as_they_are_written_in_yaml() -> None:
    from trainop_core.api.types import CleanPodPolicy, ConditionType, RestartPolicy

    shown = f"{ConditionType.SUCCEEDED} {RestartPolicy.EXIT_CODE} {CleanPodPolicy.NONE}"
    assert shown == "Succeeded ExitCode None"
