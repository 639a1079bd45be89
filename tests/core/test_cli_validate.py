"""`trainop validate` and `trainop crds`, driven through the CLI entry point, output captured."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from builders import make_job, minimal_job

from trainop_core.cli import crds_cmd, main, validate_cmd
from trainop_core.kinds.mxnet import KIND as MXJOB

MXJOB_DEPRECATED = MXJOB.deprecation


def trainop(argv: Sequence[str]) -> int:
    """Run the real `trainop` entry point; while sibling subcommands are still being written
    (their modules missing), fall back to a parser holding just the commands under test."""
    try:
        main.build_parser()
    except ModuleNotFoundError:
        parser = argparse.ArgumentParser(prog="trainop")
        sub = parser.add_subparsers(dest="command", required=True)
        validate_cmd.register(sub)
        crds_cmd.register(sub)
        args = parser.parse_args(argv)
        code: int = args.func(args)
        return code
    return main.main(argv)


def _write(tmp_path: Path, name: str, *docs: dict[str, object]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return str(path)


def test_valid_files_print_one_line_per_job_and_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _write(tmp_path, "a.yaml", minimal_job("PyTorchJob", "mnist").build())
    two = _write(
        tmp_path, "b.yaml", minimal_job("TFJob", "t").build(), minimal_job("MXNetJob", "m").build()
    )
    assert trainop(["validate", one, two]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{one}: PyTorchJob/mnist: valid",
        f"{two} (document 1): TFJob/t: valid",
        f"{two} (document 2): MXJob/m: valid",
    ]
    # upstream's MXJob webhook warns about every MXJob (deprecated in v1.8)
    assert err.splitlines() == [f"{two} (document 2): MXJob/m: warning: {MXJOB_DEPRECATED}"]


def test_problems_go_to_stderr_one_per_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = make_job("PyTorchJob", "demo").master(2).workers().container("Worker", image=None)
    path = _write(tmp_path, "bad.yaml", bad.run_policy(cleanPodPolicy="Sometimes").build())
    assert trainop(["validate", path]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"{path}: PyTorchJob/demo: spec.runPolicy.cleanPodPolicy: "
        'expected one of All, Running, None, got "Sometimes"'
    ]
    fixed = bad.run_policy(cleanPodPolicy="All").build()
    assert trainop(["validate", _write(tmp_path, "bad.yaml", fixed)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: PyTorchJob/demo: spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]"
        ".image: required field is missing",
        f"{path}: PyTorchJob/demo: spec.pytorchReplicaSpecs.Master.replicas: must be 1",
    ]


def test_good_and_bad_documents_of_one_file_are_each_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        "jobs.yaml",
        minimal_job("TFJob", "ok").build(),
        make_job("XGBoostJob", "x").workers().build(),
    )
    assert trainop(["validate", path]) == 2
    out, err = capsys.readouterr()
    assert out == f"{path} (document 1): TFJob/ok: valid\n"
    assert err == f"{path} (document 2): XGBoostJob/x: spec.xgbReplicaSpecs.Master: is required\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file", id="a missing file"),
        pytest.param("kind: [", "not valid YAML or JSON", id="a file that is not YAML"),
        pytest.param("---\n", "no jobs found", id="a file without jobs"),
        pytest.param("- 1\n", "expected a mapping", id="a file holding a list"),
    ],
)
def test_bad_files_exit_2_with_a_message_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "job.yaml"
    if content is not None:
        path.write_text(content)
    assert trainop(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: ")
    assert message in err
    assert "Traceback" not in err


def test_crds_prints_a_yaml_stream_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert trainop(["crds"]) == 0
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = list(yaml.load_all(capsys.readouterr().out, Loader=loader))
    names = [d["metadata"]["name"] for d in docs]
    assert {"tfjobs.kubeflow.org", "pytorchjobs.kubeflow.org", "mxjobs.kubeflow.org"} <= set(names)
    assert all(d["kind"] == "CustomResourceDefinition" for d in docs)


def test_crds_as_json_is_a_list_and_can_name_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert trainop(["crds", "-o", "json", "XGBoostJob", "mxnetjob"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kind"] == "List"
    assert [i["metadata"]["name"] for i in listing["items"]] == [
        "mxjobs.kubeflow.org",
        "xgboostjobs.kubeflow.org",
    ]


def test_crds_of_an_unknown_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert trainop(["crds", "FooJob"]) == 2
    err = capsys.readouterr().err
    assert "FooJob" in err and "TrainJob, TrainingRuntime, ClusterTrainingRuntime" in err


def test_crds_prints_trainers_crds_by_kind_and_with_every_other_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trainer_dir = Path(__file__).resolve().parents[2] / "operator" / "trainer" / "crds"
    shipped = {
        (crd := yaml.safe_load(p.read_text()))["metadata"]["name"]: crd
        for p in trainer_dir.glob("*.yaml")
    }
    assert trainop(["crds", "TrainJob", "trainingruntime", "ClusterTrainingRuntime"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in docs] == [
        "trainjobs.trainer.kubeflow.org",
        "trainingruntimes.trainer.kubeflow.org",
        "clustertrainingruntimes.trainer.kubeflow.org",
    ]
    assert {d["metadata"]["name"]: d for d in docs} == shipped  # what operator/trainer holds
    assert trainop(["crds", "-o", "json"]) == 0
    names = [i["metadata"]["name"] for i in json.loads(capsys.readouterr().out)["items"]]
    assert len(names) == 10 and names[-3:] == [d["metadata"]["name"] for d in docs]
