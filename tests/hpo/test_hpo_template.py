"""Job templates: reading them with placeholders intact, and each trial's job name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from builders import make_job
from hpo_support import quadratic_template
from trainop_hpo.template import read_template, trial_job, trial_name

from trainop_core.api.validation import check_metadata, prepare
from trainop_core.errors import InvalidJobError

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_a_trial_job_is_the_template_filled_and_named_for_the_trial() -> None:
    template = quadratic_template("t")
    job = trial_job(template, {"lr": 0.5}, "ab12_00003")
    assert job["metadata"]["name"] == "quad-ab12-00003"
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert command["command"][3] == "0.5"
    assert "${trialParameters.lr}" in str(template), "the template itself is left as it was"
    prepare(job)  # a valid job of its kind


@pytest.mark.parametrize(
    ("name", "workers"),
    [("x" * 63, 1), ("Quad_Model.v2", 1), ("9lives", 1), ("a" * 40, 10000), (None, 1)],
    ids=[
        "a name already at the limit is shortened",
        "capitals, dots and underscores become a DNS label",
        "a name starting with a digit gets a letter first",
        "many workers leave room for the longest pod name",
        "a template without a name",
    ],
)
def test_trial_names_are_dns_1035_labels_short_enough_for_their_pods(
    name: str | None, workers: int
) -> None:
    builder = make_job("PyTorchJob", "x").master().workers(workers).command(["python", "t.py"])
    template = builder.name(name).env("Master", LR="${trialParameters.lr}").build()
    job_name = trial_name(template, "9f2c1_00042")
    assert DNS_1035.match(job_name), job_name
    assert job_name.endswith("-9f2c1-00042")
    assert check_metadata(job_name, "default") == []
    prepare(trial_job(template, {"lr": 1}, "9f2c1_00042"))  # its pod names fit as well


def test_a_template_without_placeholders_is_an_error() -> None:
    template = make_job("PyTorchJob", "plain").master().command(["python", "t.py"]).build()
    with pytest.raises(InvalidJobError, match=re.escape("uses no ${trialParameters.NAME}")):
        read_template(template)


def test_a_template_file_must_hold_exactly_one_job(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    job = make_job("PyTorchJob").master().env("Master", A="${trialParameters.a}").yaml()
    path.write_text(job + "---\n" + job)
    with pytest.raises(InvalidJobError, match="expected exactly one job, found 2 jobs"):
        read_template(path)
