"""Admission warnings: what upstream's webhook accepts but warns about, from every entry point
(`trainop validate`, `TrainingClient.create`; the operator's events are tested with it)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.builders import JobBuilder, make_job
from trainop_core import AdmissionWarning, TrainingClient
from trainop_core.api.admission import admission_warnings
from trainop_core.api.job import TrainingJob
from trainop_core.api.validation import prepare
from trainop_core.backends.base import LogLine
from trainop_core.cli import main
from trainop_core.kinds.base import Kind

NPROC_WARNING = "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"


def elastic_with_deprecated_nproc() -> JobBuilder:
    return make_job("PyTorchJob", "el").workers(2).spec(elasticPolicy={"nProcPerNode": 4})


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (elastic_with_deprecated_nproc, [NPROC_WARNING]),
        (lambda: make_job("PyTorchJob").workers(2).spec(nprocPerNode="4"), []),
        (lambda: make_job("PyTorchJob").workers(2).spec(elasticPolicy={"maxReplicas": 3}), []),
        (lambda: make_job("TFJob").workers(2), []),
        (lambda: make_job("MXJob").scheduler().servers(1).workers(1), ["MXJob is deprecated"]),
    ],
    ids=[
        "the deprecated elastic nProcPerNode warns as upstream's webhook does",
        "spec.nprocPerNode gives no warning",
        "an elastic policy without nProcPerNode gives no warning",
        "a TFJob gives no warning",
        "every MXJob is warned that the kind is deprecated",
    ],
)
def test_admission_warnings(build: object, expected: list[str]) -> None:
    kind, job = prepare(build().build())  # type: ignore[operator]
    found = [str(w) for w in admission_warnings(job, kind)]
    assert len(found) == len(expected)
    for text, start in zip(found, expected, strict=True):
        assert text.startswith(start)


def test_trainop_validate_prints_the_warning_and_still_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "el.yaml"
    path.write_text(yaml.safe_dump(elastic_with_deprecated_nproc().build()))

    assert main.main(["validate", str(path)]) == 0

    out, err = capsys.readouterr()
    assert out == f"{path}: PyTorchJob/el: valid\n"
    assert err == f"{path}: PyTorchJob/el: warning: {NPROC_WARNING}\n"


class Recording:
    """A backend that only stores what it is given."""

    name = "recording"

    def __init__(self) -> None:
        self.jobs: list[TrainingJob] = []

    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        self.jobs.append(job)
        return job

    def logs(self, *args: object, **kwargs: object) -> Iterator[LogLine]:
        return iter([])


def test_create_issues_the_warning_and_creates_the_job() -> None:
    backend = Recording()
    client = TrainingClient(backend)  # type: ignore[arg-type]

    with pytest.warns(AdmissionWarning) as caught:
        client.create(elastic_with_deprecated_nproc().build())

    assert [str(w.message) for w in caught] == [NPROC_WARNING]
    assert caught[0].filename == __file__  # points at the caller's create()
    assert [job.name for job in backend.jobs] == ["el"]


def test_create_issues_no_warning_for_a_job_without_one() -> None:
    client = TrainingClient(Recording())  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.create(make_job("PyTorchJob", "plain").master().workers(1).build())
