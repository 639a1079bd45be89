"""Search spaces written as strings: parsed without Ray, errors naming the parameter, and the
Ray Tune domains they become."""

from __future__ import annotations

import pytest
from trainop_hpo import ParamSpec, SpaceError, parse_param, parse_params


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loguniform:1e-4:1e-1", ParamSpec("p", "loguniform", low=1e-4, high=0.1)),
        ("uniform:-1:1", ParamSpec("p", "uniform", low=-1.0, high=1.0)),
        ("randint:2:10", ParamSpec("p", "randint", low=2, high=10)),
        ("choice:3,5,7", ParamSpec("p", "choice", values=(3, 5, 7))),
        ("choice:adam, sgd", ParamSpec("p", "choice", values=("adam", "sgd"))),
        ("grid:0.1,1,x", ParamSpec("p", "grid", values=(0.1, 1, "x"))),
    ],
    ids=[
        "loguniform takes two bounds",
        "uniform takes negative bounds",
        "randint takes integers",
        "choice keeps integers integers",
        "choice keeps words words, spaces trimmed",
        "grid mixes numbers and words",
    ],
)
def test_a_search_space_string_parses(text: str, expected: ParamSpec) -> None:
    assert parse_param("p", text) == expected


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("lr", "--param 'lr': expected NAME=SPEC"),
        ("=uniform:0:1", "expected NAME=SPEC"),
        ("lr=normal:0:1", "parameter 'lr': 'normal:0:1' is not a search space"),
        ("lr=0.1", "parameter 'lr': '0.1' is not a search space"),
        ("lr=uniform:1", "parameter 'lr': uniform: expected uniform:LO:HI"),
        ("lr=uniform:a:b", "parameter 'lr': uniform: LO and HI must be numbers"),
        ("lr=uniform:1:1", "parameter 'lr': uniform: needs LO < HI"),
        ("lr=loguniform:0:1", "parameter 'lr': loguniform: needs 0 < LO"),
        ("depth=randint:1.5:4", "parameter 'depth': randint: LO and HI must be integers"),
        ("depth=choice:", "parameter 'depth': choice: needs a comma-separated list"),
        ("depth=grid:1,,2", "parameter 'depth': grid: needs a comma-separated list"),
        ("depth=choice:3,3", "parameter 'depth': choice: values repeat"),
    ],
    ids=[
        "a parameter without a spec",
        "a spec without a name",
        "an unknown distribution",
        "a bare value",
        "a range with one bound",
        "a range of words",
        "an empty range",
        "a log range from zero",
        "an integer range of floats",
        "an empty list",
        "a list with a hole",
        "a list with a repeat",
    ],
)
def test_a_bad_search_space_is_an_error_naming_the_parameter(item: str, message: str) -> None:
    with pytest.raises(SpaceError) as err:
        parse_params([item])
    assert message in str(err.value)


def test_a_parameter_given_twice_is_an_error() -> None:
    with pytest.raises(SpaceError, match="parameter 'lr': given twice"):
        parse_params(["lr=uniform:0:1", "lr=choice:1,2"])


def test_strings_and_specs_become_ray_tune_domains_and_the_rest_passes_through() -> None:
    tune = pytest.importorskip("ray.tune")
    from trainop_hpo.space import to_tune_space

    space = to_tune_space(
        {
            "lr": "loguniform:1e-4:1e-1",
            "depth": parse_param("depth", "randint:2:5"),
            "opt": "choice:adam,sgd",
            "seed": "grid:1,2",
            "momentum": tune.uniform(0.1, 0.9),
            "name": "plain text",
        }
    )
    assert type(space["lr"].sampler).__name__ == "_LogUniform"
    assert (space["lr"].lower, space["lr"].upper) == (1e-4, 0.1)
    assert (space["depth"].lower, space["depth"].upper) == (2, 5)
    assert space["opt"].categories == ["adam", "sgd"]
    assert space["seed"] == {"grid_search": [1, 2]}
    assert (space["momentum"].lower, space["momentum"].upper) == (0.1, 0.9)
    assert space["name"] == "plain text"
