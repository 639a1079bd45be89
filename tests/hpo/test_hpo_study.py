"""Studies as `trainop ui` finds them: the directories `tune_job` described, by name only."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainop_hpo.space import parse_param
from trainop_hpo.study import STUDY_FILE, find_study, list_studies, study_name, write_study_file

TEMPLATE = {"kind": "PyTorchJob", "metadata": {"name": "quadratic"}}


def test_a_described_directory_is_a_study_and_the_newest_comes_first(tmp_path: Path) -> None:
    space = {"lr": parse_param("lr", "grid:0.001,0.01")}
    write_study_file(tmp_path / "old", "loss", "min", TEMPLATE, space, "team")
    write_study_file(tmp_path / "new", "acc", "max", TEMPLATE, {"depth": "choice:3,5"})
    (tmp_path / "plain-ray-tune-run").mkdir()  # no description: not a study
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / STUDY_FILE).write_text("{not json")
    studies = list_studies(tmp_path)
    assert [s.name for s in studies] == ["new", "old"]
    old = studies[1]
    assert (old.metric, old.mode, old.kind, old.template) == (
        "loss",
        "min",
        "PyTorchJob",
        "quadratic",
    )
    assert old.params == {"lr": "grid:0.001,0.01"} and old.namespace == "team"


@pytest.mark.parametrize(
    "name",
    ["../outside", "a/b", ".hidden", "", "x" * 300],
    ids=["a parent path", "a nested path", "a hidden name", "no name", "an overlong name"],
)
def test_a_study_is_found_by_its_own_name_only(tmp_path: Path, name: str) -> None:
    root = tmp_path / "studies"
    write_study_file(tmp_path / "outside", "loss", "min", TEMPLATE, {})
    write_study_file(root / ".hidden", "loss", "min", TEMPLATE, {})
    assert find_study(root, name) is None


def test_a_study_is_named_after_its_template_and_time() -> None:
    assert study_name(TEMPLATE, 0).startswith("quadratic-1970-01-01_")
    assert study_name({"metadata": {"name": "a b/../c"}}, 0).startswith("a-b-c-1970")


@pytest.mark.parametrize("text", ["grid:0.001,0.01", "loguniform:0.0001:0.1", "choice:a,b"])
def test_a_search_space_is_described_as_written(text: str) -> None:
    assert str(parse_param("lr", text)) == text
