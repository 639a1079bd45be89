"""`trainop render`: golden files of what the operator creates on a first reconcile, per kind.

Regenerate the goldens with TRAINOP_UPDATE_GOLDEN=1 after a deliberate change, and review the diff.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.builders import JobBuilder, make_job
from trainop_core.cli import render_cmd

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"


def jax_job() -> JobBuilder:
    return make_job(
        "JAXJob", "jax-mnist", replica_field="jaxReplicaSpecs", container="jax"
    ).workers(2)


def mpi_job() -> JobBuilder:
    b = make_job("MPIJob", "pi").spec(slotsPerWorker=2).replica("Launcher", 1).workers(2)
    return b.command(["mpirun", "-np", "4", "python", "pi.py"], "Launcher")


def custom_port() -> JobBuilder:
    b = make_job("TFJob", "tf-port").ps().workers(1)
    for rtype in ("PS", "Worker"):
        b.container(rtype, ports=[{"name": "tfjob-port", "containerPort": 3333}])
    return b


def tf_sidecar() -> JobBuilder:
    b = make_job("TFJob", "tf-dist").chief().ps().workers(2)
    return b.add_container("Worker", name="metrics-sidecar", image="busybox:1.36")


CASES: dict[str, tuple[Callable[[], JobBuilder], list[str]]] = {
    "pytorch-master-2-workers": (lambda: make_job("PyTorchJob", "mnist").master().workers(2), []),
    "pytorch-nproc-4": (
        lambda: make_job("PyTorchJob", "mnist").master().workers(2).spec(nprocPerNode="4"),
        [],
    ),
    "tf-chief-ps-2-workers": (tf_sidecar, []),
    "tf-single-worker": (lambda: make_job("TFJob", "tf-solo").workers(1), []),
    "mxjob-scheduler-server-2-workers": (
        lambda: make_job("MXJob", "mx").scheduler().servers(1).workers(2),
        [],
    ),
    "xgboost-master-2-workers": (lambda: make_job("XGBoostJob", "xgb").master().workers(2), []),
    "tf-custom-port": (custom_port, ["--namespace", "research"]),
    "jaxjob": (jax_job, []),
    "paddle-master-2-workers": (lambda: make_job("PaddleJob", "pd").master().workers(2), []),
    "paddle-collective-2-workers": (lambda: make_job("PaddleJob", "pd").workers(2), []),
    "mpi-launcher-2-workers": (mpi_job, []),
    "pytorch-volcano": (
        lambda: (
            make_job("PyTorchJob", "gang")
            .master()
            .workers(1)
            .run_policy(schedulingPolicy={"queue": "training"})
        ),
        ["--gang-scheduler-name", "volcano"],
    ),
}


def run_render(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="trainop")
    render_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["render", *argv])
    code: int = args.func(args)
    return code


@pytest.mark.parametrize("case", list(CASES), ids=[f"{c} renders as its golden" for c in CASES])
def test_render_matches_the_golden_file(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build, flags = CASES[case]
    source = tmp_path / f"{case}.yaml"
    source.write_text(build().yaml())
    assert run_render([str(source), *flags]) == 0
    rendered = capsys.readouterr().out
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert rendered == golden.read_text()


def test_the_pod_group_comes_first_then_pods_then_services() -> None:
    items = yaml.safe_load((GOLDEN / "pytorch-volcano.yaml").read_text())["items"]
    assert [i["kind"] for i in items] == ["PodGroup", "Pod", "Pod", "Service", "Service"]


def test_json_output_is_the_same_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "job.yaml"
    source.write_text(make_job("XGBoostJob", "xgb").master().workers(2).yaml())
    assert run_render([str(source), "-o", "json"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == yaml.safe_load(
        (GOLDEN / "xgboost-master-2-workers.yaml").read_text()
    )


def test_the_placeholder_uid_is_stable_and_differs_per_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "two.yaml"
    docs = [make_job("TFJob", n).workers(1).build() for n in ("one", "two")]
    source.write_text(yaml.safe_dump_all(docs))
    assert run_render([str(source)]) == 0
    items = yaml.safe_load(capsys.readouterr().out)["items"]
    uids = {i["metadata"]["ownerReferences"][0]["uid"] for i in items}
    assert len(uids) == 2
    assert run_render([str(source)]) == 0
    again = yaml.safe_load(capsys.readouterr().out)["items"]
    assert {i["metadata"]["ownerReferences"][0]["uid"] for i in again} == uids


def test_invalid_input_exits_2_with_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "bad.yaml"
    source.write_text(make_job("XGBoostJob", "Bad_Name").workers(2).yaml())
    assert run_render([str(source)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == ""
    assert len(lines) == 2
    assert any("metadata.name" in line for line in lines)
    assert any("Master" in line for line in lines)


def test_a_namespace_flag_that_contradicts_the_file_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ns.yaml"
    source.write_text(make_job("TFJob", "t").namespace("a").workers(1).yaml())
    assert run_render([str(source), "--namespace", "b"]) == 2
    assert "metadata.namespace" in capsys.readouterr().err
