"""A command task's `{{.inputs.x}}` values are data: placed once into argv strings (no shell, no
second pass), whatever they hold."""

from __future__ import annotations

from flytekit.models.literals import Literal, LiteralMap, Primitive, Scalar
from trainop_flyte.inputs import render_inputs


def text(value: str) -> Literal:
    return Literal(scalar=Scalar(primitive=Primitive(string_value=value)))


def test_an_input_is_placed_once_and_verbatim() -> None:
    hostile = "'; rm -rf / #{{.inputs.other}} $(touch x)"
    manifest = {"command": ["python", "train.py", "--tag={{.inputs.tag}}", "{{ .inputs.other }}"]}
    inputs = LiteralMap(literals={"tag": text(hostile), "other": text("o")})

    rendered = render_inputs(manifest, inputs)

    assert rendered["command"] == ["python", "train.py", f"--tag={hostile}", "o"]
