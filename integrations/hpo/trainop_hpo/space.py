"""Search spaces written as strings (for the CLI), as neutral data, and as Ray Tune domains.

`lr=loguniform:1e-4:1e-1`, `uniform:LO:HI`, `randint:LO:HI` (HI excluded, as in Ray Tune),
`choice:3,5,7` and `grid:1,2,3` parse into a `ParamSpec` without Ray; `to_tune_space` turns a
space (ParamSpecs, such strings, Ray domains or constants) into Ray Tune's `param_space`, and
the Katib export reads ParamSpecs too. Errors name the parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainop_core.errors import TerminalError

KINDS = ("loguniform", "uniform", "randint", "choice", "grid")
SYNTAX = "expected loguniform:LO:HI, uniform:LO:HI, randint:LO:HI, choice:A,B,... or grid:A,B,..."
Value = int | float | str


class SpaceError(TerminalError, ValueError):
    """A search-space entry that cannot be understood; the message names the parameter."""


@dataclass(frozen=True)
class ParamSpec:
    """One parameter's search space: a range (`low`, `high`) or a list of `values`."""

    name: str
    kind: str  # one of KINDS
    low: float = 0.0
    high: float = 0.0
    values: tuple[Value, ...] = ()

    def __str__(self) -> str:
        """As written on the command line (`grid:1,2,3`, `loguniform:0.0001:0.1`)."""
        if self.kind in ("choice", "grid"):
            return f"{self.kind}:{','.join(str(v) for v in self.values)}"
        return f"{self.kind}:{self.low:g}:{self.high:g}"


def parse_params(items: Iterable[str]) -> dict[str, ParamSpec]:
    """`["lr=loguniform:1e-4:1e-1", ...]` (the CLI's --param values) by parameter name."""
    space: dict[str, ParamSpec] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpaceError(f"--param {item!r}: expected NAME=SPEC, e.g. lr=loguniform:1e-4:1e-1")
        if name in space:
            raise SpaceError(f"parameter {name!r}: given twice")
        space[name] = parse_param(name, text)
    return space


def parse_param(name: str, text: str) -> ParamSpec:
    """One `KIND:ARGS` string as a ParamSpec; SpaceError names `name` and says what is wrong."""
    kind, sep, rest = text.strip().partition(":")
    if not sep or kind not in KINDS:
        raise SpaceError(f"parameter {name!r}: {text!r} is not a search space; {SYNTAX}")
    if kind in ("choice", "grid"):
        return ParamSpec(name, kind, values=_values(name, kind, rest))
    low, high = _bounds(name, kind, rest)
    return ParamSpec(name, kind, low=low, high=high)


def _values(name: str, kind: str, text: str) -> tuple[Value, ...]:
    words = [word.strip() for word in text.split(",")]
    if not text.strip() or any(not word for word in words):
        raise SpaceError(f"parameter {name!r}: {kind}: needs a comma-separated list, e.g. 3,5,7")
    if len(set(words)) != len(words):
        raise SpaceError(f"parameter {name!r}: {kind}: values repeat in {text!r}")
    return tuple(_scalar(word) for word in words)


def _bounds(name: str, kind: str, text: str) -> tuple[float, float]:
    parts = text.split(":")
    if len(parts) != 2:
        raise SpaceError(f"parameter {name!r}: {kind}: expected {kind}:LO:HI, got {text!r}")
    number = int if kind == "randint" else float
    try:
        low, high = (number(part.strip()) for part in parts)
    except ValueError:
        what = "integers" if kind == "randint" else "numbers"
        raise SpaceError(f"parameter {name!r}: {kind}: LO and HI must be {what}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise SpaceError(f"parameter {name!r}: {kind}: needs LO < HI, got {low:g} and {high:g}")
    if kind == "loguniform" and low <= 0:
        raise SpaceError(f"parameter {name!r}: loguniform: needs 0 < LO, got {low:g}")
    return low, high


def _scalar(word: str) -> Value:
    for number in (int, float):
        try:
            return number(word)
        except ValueError:
            pass
    return word


def spec_of(name: str, value: Any) -> ParamSpec | None:
    """`value` as a ParamSpec if it is one or a search-space string; None for anything else."""
    if isinstance(value, ParamSpec):
        return value
    if isinstance(value, str) and value.partition(":")[0] in KINDS:
        return parse_param(name, value)
    return None


def to_tune_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """Ray Tune's `param_space`: ParamSpecs and strings become domains, the rest passes as is.

    Imports Ray. A plain string that does not start with a known kind is a constant.
    """
    return {name: _domain(spec) if (spec := spec_of(name, v)) else v for name, v in space.items()}


def _domain(spec: ParamSpec) -> Any:
    from ray import tune

    if spec.kind == "loguniform":
        return tune.loguniform(spec.low, spec.high)
    if spec.kind == "uniform":
        return tune.uniform(spec.low, spec.high)
    if spec.kind == "randint":
        return tune.randint(int(spec.low), int(spec.high))
    if spec.kind == "choice":
        return tune.choice(list(spec.values))
    return tune.grid_search(list(spec.values))
