"""Webhook rules on valid and borderline jobs, and `prepare` (load + default + validate)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders import make_job, minimal_job

from trainop_core.api.load import load_job
from trainop_core.api.types import MANAGED_BY_VALUES, CleanPodPolicy
from trainop_core.api.validation import prepare, prepare_all, validate_job
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import KindRegistry

KINDS = ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"]


@pytest.mark.parametrize("kind_name", KINDS)
def test_the_smallest_job_of_each_kind_is_valid(registry: KindRegistry, kind_name: str) -> None:
    kind, job = prepare(minimal_job(kind_name).build(), registry=registry)
    assert kind.kind == kind_name
    assert validate_job(job, kind) == []


def test_prepare_returns_the_defaulted_job(registry: KindRegistry) -> None:
    _, job = prepare(minimal_job("TFJob").build(), registry=registry)
    assert job.spec.run_policy.clean_pod_policy == CleanPodPolicy.NONE


def test_prepare_accepts_a_job_model(registry: KindRegistry) -> None:
    job = load_job(minimal_job("XGBoostJob").build(), registry=registry)
    kind, prepared = prepare(job, registry=registry)
    assert (kind.kind, prepared.name) == ("XGBoostJob", "demo")


def _name_problems(registry: KindRegistry, name: str, workers: int = 1) -> list[str]:
    data = make_job("TFJob", name).workers(workers).build()
    try:
        prepare(data, registry=registry)
    except InvalidJobError as err:
        return [p.message for p in err.problems if p.path == "metadata.name"]
    return []


@pytest.mark.parametrize(
    ("name", "workers", "ok"),
    [
        pytest.param("a" * 54, 10, True, id="54 chars with 10 workers makes 63-char pod names"),
        pytest.param("a" * 54, 11, False, id="54 chars with 11 workers makes a 64-char pod name"),
        pytest.param("a" * 55, 1, False, id="55 chars with 1 worker is one too many"),
        pytest.param("a-1", 1, True, id="digits and dashes inside a name are fine"),
        pytest.param("1a", 1, False, id="a name must start with a letter"),
        pytest.param("a-", 1, False, id="a name must not end with a dash"),
        pytest.param("a.b", 1, False, id="dots are not allowed in a DNS-1035 label"),
    ],
)
def test_the_name_must_make_valid_pod_names(
    registry: KindRegistry, name: str, workers: int, ok: bool
) -> None:
    assert (_name_problems(registry, name, workers) == []) is ok


def test_a_name_too_long_for_its_pods_says_how_long_it_may_be(registry: KindRegistry) -> None:
    [message] = _name_problems(registry, "a" * 54, 11)
    assert "would be 64 characters, the limit is 63" in message
    assert "at most 53 characters" in message


@pytest.mark.parametrize("namespace", ["team-a", "0team"])
def test_a_dns_label_namespace_is_accepted(registry: KindRegistry, namespace: str) -> None:
    _, job = prepare(minimal_job("TFJob").namespace(namespace).build(), registry=registry)
    assert job.namespace == namespace


@pytest.mark.parametrize("managed_by", MANAGED_BY_VALUES)
def test_both_known_managers_are_accepted(registry: KindRegistry, managed_by: str) -> None:
    prepare(minimal_job("PyTorchJob").run_policy(managedBy=managed_by).build(), registry=registry)


def test_tfjob_accepts_replica_types_it_does_not_know(registry: KindRegistry) -> None:
    prepare(make_job("TFJob").workers().replica("Trainer").build(), registry=registry)


def test_replica_types_are_case_insensitive(registry: KindRegistry) -> None:
    _, job = prepare(make_job("PyTorchJob").replica("master").build(), registry=registry)
    assert list(job.spec.replica_specs) == ["Master"]


def test_prepare_all_reports_problems_of_every_document(
    tmp_path: Path, registry: KindRegistry
) -> None:
    docs = [
        minimal_job("TFJob", "good").build(),
        make_job("PyTorchJob", "Bad").workers().build(),
        make_job("XGBoostJob", "nomaster").workers().build(),
    ]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    with pytest.raises(InvalidJobError) as caught:
        prepare_all(path, registry=registry)
    assert str(caught.value).splitlines() == [
        f"{path} (document 2): PyTorchJob/Bad: metadata.name: "
        "\"Bad\" is not a valid DNS label: use lowercase letters, digits and '-', "
        "start with a lowercase letter and end with a letter or digit",
        f"{path} (document 3): XGBoostJob/nomaster: spec.xgbReplicaSpecs.Master: is required",
    ]


def test_prepare_wants_exactly_one_job(registry: KindRegistry) -> None:
    two = yaml.safe_dump_all([minimal_job("TFJob", "a").build(), minimal_job("TFJob", "b").build()])
    with pytest.raises(InvalidJobError, match="expected exactly one job, found 2 jobs"):
        prepare(two, registry=registry)
