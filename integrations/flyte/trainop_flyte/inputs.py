"""`{{.inputs.<name>}}` placeholders in a command job, filled from the task's inputs."""

from __future__ import annotations

import re
from typing import Any

from flytekit.models.literals import Literal, LiteralMap

_PLACEHOLDER = re.compile(r"\{\{\s*\.inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def input_values(inputs: LiteralMap | None) -> dict[str, str]:
    """The inputs as the text that replaces their placeholders (primitive inputs only)."""
    if inputs is None:
        return {}
    return {name: _text(name, literal) for name, literal in inputs.literals.items()}


def _text(name: str, literal: Literal) -> str:
    scalar = literal.scalar
    if scalar is None or scalar.primitive is None:
        raise ValueError(f"input {name!r}: only str, int, float and bool inputs can be placed")
    value = scalar.primitive.value
    return str(value).lower() if isinstance(value, bool) else str(value)


def render_inputs(manifest: Any, inputs: LiteralMap | None) -> Any:
    """A copy of `manifest` with every `{{.inputs.<name>}}` replaced; unknown names are errors."""
    values = input_values(inputs)
    return _render(manifest, values)


def _render(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _PLACEHOLDER.sub(lambda match: _lookup(match.group(1), values), node)
    if isinstance(node, dict):
        return {key: _render(value, values) for key, value in node.items()}
    if isinstance(node, list):
        return [_render(item, values) for item in node]
    return node


def _lookup(name: str, values: dict[str, str]) -> str:
    if name not in values:
        known = ", ".join(sorted(values)) or "none"
        raise ValueError(f"placeholder {{{{.inputs.{name}}}}}: no such input (inputs: {known})")
    return values[name]
