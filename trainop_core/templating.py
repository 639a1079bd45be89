"""Job templates with Katib's placeholder syntax: `${trialParameters.NAME}` in any string.

The trial runner fills them per trial, and the KFP helper exposes them as component inputs.
Substitution is exact: every placeholder needs a value and every value must be used, so a typo
on either side is an error rather than a silently wrong job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainop_core.errors import InvalidJobError, Problem

PLACEHOLDER = re.compile(r"\$\{trialParameters\.([A-Za-z_][\w-]*)\}")


def placeholders(template: Any) -> dict[str, list[str]]:
    """Each parameter name used in the template, with the field paths that use it. Pure."""
    found: dict[str, list[str]] = {}
    for path, text in _strings(template, ""):
        for name in PLACEHOLDER.findall(text):
            found.setdefault(name, []).append(path)
    return found


def substitute(template: Any, params: Mapping[str, Any]) -> Any:
    """A copy of the template with every placeholder replaced by str(value).

    Raises InvalidJobError naming each missing parameter (with where it is used) and each
    parameter that the template never uses.
    """
    used = placeholders(template)
    problems = [
        Problem(paths[0], f"needs a value for trial parameter {name!r}")
        for name, paths in sorted(used.items())
        if name not in params
    ]
    problems += [
        Problem(
            f"parameters.{name}", "is not used by the template (no ${trialParameters." + name + "})"
        )
        for name in sorted(params)
        if name not in used
    ]
    if problems:
        raise InvalidJobError(problems)
    return _replace(template, {name: _text(value) for name, value in params.items()})


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)  # keep "1.0" a float on the command line
    return str(value)


def _replace(node: Any, values: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return PLACEHOLDER.sub(lambda m: values[m.group(1)], node)
    if isinstance(node, Mapping):
        return {key: _replace(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace(item, values) for item in node]
    return node


def _strings(node: Any, path: str) -> list[tuple[str, str]]:
    if isinstance(node, str):
        return [(path, node)]
    if isinstance(node, Mapping):
        return [
            pair
            for key, value in node.items()
            for pair in _strings(value, f"{path}.{key}" if path else str(key))
        ]
    if isinstance(node, list):
        return [pair for i, item in enumerate(node) for pair in _strings(item, f"{path}[{i}]")]
    return []
