"""`job_component(path)`: a KFP component made from a job file, its parameters as inputs.

A job file marks what a pipeline may vary with Katib's placeholders, `${trialParameters.NAME}`
(the trial runner fills the same templates). Each NAME becomes a component input. Defaults, and
with them input types, come from an optional annotation holding a JSON/YAML mapping:

    metadata:
      annotations:
        trainop.io/parameters: '{"epochs": 10, "lr": 0.05}'

An input with no default is a required `str`. The job text is embedded in the component (the
pipeline's pods do not have the file) and the component calls the same runner as
`run_training_job`, with the same passthroughs, outputs and failure behaviour.

KFP ships a lightweight component as its function's source, so the function is generated. It is
built as a syntax tree, never by pasting text: the job text, the file name, the defaults and the
backend are constants in that tree (they cannot become code whatever they hold), and the only
names taken from the job (the function's and the inputs') must be plain ASCII identifiers.
"""

from __future__ import annotations

import ast
import keyword
import linecache
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainop_core.api.load import parse_text
from trainop_core.api.reader import read_file
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.templating import placeholders
from trainop_kfp.constants import DEFAULT_BACKEND, DEFAULT_TIMEOUT_SECONDS, PARAMETERS_ANNOTATION
from trainop_kfp.runner import load_job_text

# Inputs every generated component has; a job parameter may not take one of these names.
FIXED_INPUTS = ("metrics", "task_config", "backend", "namespace", "timeout_seconds",
                "delete_after", "workdir")  # fmt: skip
# Names the generated body uses itself.
_BODY_NAMES = ("run_component",)
_TYPES: Mapping[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}
_INT64 = 2**63


def job_component(
    path: str | Path, *, name: str | None = None, backend: str = DEFAULT_BACKEND
) -> Any:
    """A lightweight Python component (kfp `PythonComponent`) running the job in `path`.

    `name` defaults to the job's metadata.name; `backend` is the default of the `backend` input.
    Raises InvalidJobError when the file is unreadable, a parameter name cannot be an input, or
    the annotation gives defaults for parameters the job does not use.
    """
    path = Path(path)
    text = _read(path)
    inputs = job_parameters(load_job_text(text), str(path))
    function = _identifier(name or _job_name(text) or path.stem)
    tree = _component_tree(function, inputs, text=text, origin=path.name, backend=str(backend))
    source = ast.unparse(tree) + "\n"
    return _decorate(_compile(function, source, f"<trainop job_component {function}>"))


def _component_tree(
    function: str, inputs: Mapping[str, Any], *, text: str, origin: str, backend: str
) -> ast.Module:
    """The component function as a syntax tree; every value from the job is an ast.Constant."""
    required = [p for p in _ordered(inputs) if inputs[p] is _REQUIRED]
    optional = [p for p in _ordered(inputs) if inputs[p] is not _REQUIRED]
    fixed = [
        ("backend", "str", backend),
        ("namespace", "str", ""),
        ("timeout_seconds", "int", DEFAULT_TIMEOUT_SECONDS),
        ("delete_after", "bool", True),
        ("workdir", "str", ""),
    ]
    args = [_arg("metrics", _subscript("Output", "Metrics")), _arg("task_config", "TaskConfig")]
    args += [_arg(p, "str") for p in required]
    args += [_arg(p, _TYPES[type(inputs[p])]) for p in optional]
    args += [_arg(field, kind) for field, kind, _ in fixed]
    defaults = [ast.Constant(inputs[p]) for p in optional]
    defaults += [ast.Constant(value) for _, _, value in fixed]
    params = sorted(inputs)
    call = {
        "metrics": _name("metrics"),
        "task_config": _name("task_config"),
        "template": ast.Constant(text),
        "params": ast.Dict([ast.Constant(p) for p in params], [_name(p) for p in params]),
        **{field: _name(field) for field, _, _ in fixed},
    }
    doc = f"Run the job of {origin} with these parameters; fail when it Failed or timed out."
    body: list[ast.stmt] = [
        ast.Expr(ast.Constant(doc)),
        ast.ImportFrom("trainop_kfp.runner", [ast.alias("run_component")], 0),
        ast.Return(
            ast.Call(_name("run_component"), [], [ast.keyword(k, v) for k, v in call.items()])
        ),
    ]
    pairs = ast.List([_pair("state"), _pair("name")], ast.Load())
    outputs = ast.Call(_name("NamedTuple"), [ast.Constant("Outputs"), pairs], [])
    signature = ast.arguments([], args, None, [], [], None, defaults)
    func = ast.FunctionDef(
        name=function, args=signature, body=body, decorator_list=[], returns=outputs
    )
    return ast.fix_missing_locations(ast.Module([func], []))


def _name(identifier: str) -> ast.Name:
    return ast.Name(identifier, ast.Load())


def _subscript(outer: str, inner: str) -> ast.Subscript:
    return ast.Subscript(_name(outer), _name(inner), ast.Load())


def _arg(identifier: str, annotation: ast.expr | str) -> ast.arg:
    return ast.arg(identifier, _name(annotation) if isinstance(annotation, str) else annotation)


def _pair(field: str) -> ast.Tuple:
    return ast.Tuple([ast.Constant(field), _name("str")], ast.Load())


_REQUIRED = object()


def job_parameters(template: Mapping[str, Any], origin: str = "") -> dict[str, Any]:
    """Each parameter the template uses -> its default from the annotation (or `_REQUIRED`)."""
    used = placeholders(template)
    defaults = _annotated_defaults(template, origin)
    problems = [
        Problem(f"metadata.annotations[{PARAMETERS_ANNOTATION}].{key}", "is not used by the job")
        for key in sorted(defaults)
        if key not in used
    ]
    problems += [
        Problem(paths[0], f"parameter {param!r} cannot be a component input ({why})")
        for param, paths in sorted(used.items())
        if (why := _bad_name(param))
    ]
    if problems:
        raise InvalidJobError(problems, source=origin)
    return {param: defaults.get(param, _REQUIRED) for param in used}


def _annotated_defaults(template: Mapping[str, Any], origin: str) -> dict[str, Any]:
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(PARAMETERS_ANNOTATION)
    if raw is None:
        return {}
    where = f"metadata.annotations[{PARAMETERS_ANNOTATION}]"
    try:
        docs = parse_text(raw, where) if isinstance(raw, str) else []
    except InvalidJobError:  # not YAML, or beyond what a job source may hold
        docs = []
    defaults = docs[0].data if len(docs) == 1 else None
    if not isinstance(defaults, dict):
        expected = 'a JSON or YAML mapping of parameter defaults, e.g. {"lr": 0.1}'
        raise InvalidJobError([Problem(where, f"expected {expected}")], source=origin)
    problems = [
        Problem(f"{where}.{k}", why) for k, v in defaults.items() if (why := _bad_default(v))
    ]
    if problems:
        raise InvalidJobError(problems, source=origin)
    return {str(k): v for k, v in defaults.items()}


def _bad_default(value: Any) -> str:
    if type(value) not in _TYPES:
        return "expected a string, number or boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    if type(value) is int and not -_INT64 <= value < _INT64:
        return "expected an integer that fits 64 bits"
    return ""


def _bad_name(param: str) -> str:
    if not (param.isascii() and param.isidentifier()) or keyword.iskeyword(param):
        return "not a Python identifier"
    if param in FIXED_INPUTS or param in _BODY_NAMES:
        return "the component already has an input of that name"
    return ""


def _ordered(inputs: Mapping[str, Any]) -> list[str]:
    """Required inputs first (Python's rule for defaults), each group by name."""
    return sorted(inputs, key=lambda param: (inputs[param] is not _REQUIRED, param))


def _read(path: Path) -> str:
    return read_file(path)  # bounded and strict like every job source


def _job_name(text: str) -> str:
    metadata = load_job_text(text).get("metadata") or {}
    return str(metadata.get("name") or "")


def _identifier(name: str) -> str:
    """An ASCII identifier from a job or file name (never a keyword: `class` -> `job_class`)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_")[:100] or "job"
    clash = cleaned[0].isdigit() or keyword.iskeyword(cleaned) or cleaned in _RESERVED
    return f"job_{cleaned}" if clash else cleaned


# Names the component's module gets from kfp.dsl and typing: the function must not shadow them.
_RESERVED = frozenset({"Output", "Metrics", "TaskConfig", "NamedTuple", "str", "int", "float",
                       "bool", "run_component"})  # fmt: skip


def _compile(function: str, source: str, filename: str) -> Any:
    # kfp reads a component's source with inspect.getsource: keep it where linecache finds it.
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    namespace: dict[str, Any] = {}
    exec(
        "from kfp.dsl import *\nfrom typing import *", namespace
    )  # reason: the names kfp's runtime module has
    exec(
        compile(source, filename, "exec", dont_inherit=True), namespace
    )  # reason: a generated signature is the point; its tree holds user values as constants only
    return namespace[function]


def _decorate(func: Any) -> Any:
    from trainop_kfp.components import PASSTHROUGHS, component

    return component(task_config_passthroughs=PASSTHROUGHS)(func)
