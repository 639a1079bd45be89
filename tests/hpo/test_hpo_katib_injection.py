"""Katib fills `${trialParameters.x}` with a string replace over the trial spec's JSON text: a
value with a quote would add fields to every trial's job. The export refuses such values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import make_job
from trainop_hpo import SpaceError, katib_experiment


def template() -> dict[str, Any]:
    args = ["--opt=${trialParameters.opt}"]
    return make_job("TFJob", "inj").workers(1, command=["python", "train.py", *args]).build()


def katib_substitutes(experiment: dict[str, Any], value: str) -> Any:
    """What Katib's controller does with one assignment: JSON text, replace, parse."""
    text = json.dumps(experiment["spec"]["trialTemplate"]["trialSpec"])
    return json.loads(text.replace("${trialParameters.opt}", value))


@pytest.mark.parametrize(
    "value",
    [
        'adam", "privileged": true, "x": "',
        "adam\\",
        "${trialParameters.other}",
        "adam\nsgd",
    ],
    ids=["a quote", "a backslash", "another placeholder", "a control character"],
)
def test_values_katib_would_paste_unescaped_are_refused(value: str) -> None:
    with pytest.raises(SpaceError, match="cannot substitute"):
        katib_experiment(template(), {"opt": value}, "loss")  # a constant: a one-value list


def test_plain_values_are_substituted_as_themselves() -> None:
    experiment = katib_experiment(template(), {"opt": "choice:adam,sgd-2.0"}, "loss")
    job = katib_substitutes(experiment, "sgd-2.0")
    args = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert args[-1] == "--opt=sgd-2.0"
