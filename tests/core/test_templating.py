import pytest

from trainop_core.errors import InvalidJobError
from trainop_core.templating import placeholders, substitute

TEMPLATE = {
    "spec": {
        "containers": [
            {
                "args": ["--lr=${trialParameters.lr}", "--depth", "${trialParameters.depth}"],
                "env": [{"name": "LR", "value": "${trialParameters.lr}"}],
            }
        ]
    }
}


def test_placeholders_are_found_with_their_paths() -> None:
    assert placeholders(TEMPLATE) == {
        "lr": ["spec.containers[0].args[0]", "spec.containers[0].env[0].value"],
        "depth": ["spec.containers[0].args[2]"],
    }


def test_substitution_replaces_every_use_and_keeps_the_template() -> None:
    job = substitute(TEMPLATE, {"lr": 0.01, "depth": 5})
    container = job["spec"]["containers"][0]
    assert container["args"] == ["--lr=0.01", "--depth", "5"]
    assert container["env"][0]["value"] == "0.01"
    assert TEMPLATE["spec"]["containers"][0]["args"][0] == "--lr=${trialParameters.lr}"


def test_an_integral_float_stays_a_float_on_the_command_line() -> None:
    job = substitute(TEMPLATE, {"lr": 1.0, "depth": 3})
    assert job["spec"]["containers"][0]["args"][0] == "--lr=1.0"


def test_a_missing_parameter_names_where_it_is_used() -> None:
    with pytest.raises(InvalidJobError) as err:
        substitute(TEMPLATE, {"lr": 0.1})
    assert "spec.containers[0].args[2]: needs a value for trial parameter 'depth'" in str(err.value)


def test_an_unused_parameter_is_an_error() -> None:
    with pytest.raises(InvalidJobError) as err:
        substitute(TEMPLATE, {"lr": 0.1, "depth": 2, "momentum": 0.9})
    assert "parameters.momentum: is not used by the template" in str(err.value)
