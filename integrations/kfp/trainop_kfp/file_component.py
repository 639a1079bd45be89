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
"""

from __future__ import annotations

import keyword
import linecache
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from trainop_core.errors import InvalidJobError, Problem
from trainop_core.templating import placeholders
from trainop_kfp.constants import DEFAULT_BACKEND, DEFAULT_TIMEOUT_SECONDS, PARAMETERS_ANNOTATION
from trainop_kfp.runner import load_job_text

# Inputs every generated component has; a job parameter may not take one of these names.
FIXED_INPUTS = ("metrics", "task_config", "backend", "namespace", "timeout_seconds",
                "delete_after", "workdir")  # fmt: skip
_TYPES: Mapping[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}

_SOURCE = '''\
def {function}(
    metrics: Output[Metrics],
    task_config: TaskConfig,{inputs}
    backend: str = {backend!r},
    namespace: str = "",
    timeout_seconds: int = {timeout!r},
    delete_after: bool = True,
    workdir: str = "",
) -> NamedTuple("Outputs", [("state", str), ("name", str)]):
    """Run the job of {origin} with these parameters; fail when it Failed or timed out."""
    from trainop_kfp.runner import run_component

    return run_component(
        metrics=metrics,
        task_config=task_config,
        template={template!r},
        params={{{params}}},
        backend=backend,
        namespace=namespace,
        timeout_seconds=timeout_seconds,
        delete_after=delete_after,
        workdir=workdir,
    )
'''


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
    source = _SOURCE.format(
        function=function,
        inputs="".join(f"\n    {_signature(param, inputs[param])}," for param in _ordered(inputs)),
        backend=backend,
        timeout=DEFAULT_TIMEOUT_SECONDS,
        origin=path.name,
        template=text,
        params=", ".join(f"{param!r}: {param}" for param in sorted(inputs)),
    )
    return _decorate(_compile(function, source, f"<trainop job_component {path}>"))


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
        defaults = yaml.safe_load(raw) if isinstance(raw, str) else None
    except yaml.YAMLError:
        defaults = None
    if not isinstance(defaults, dict):
        expected = 'a JSON or YAML mapping of parameter defaults, e.g. {"lr": 0.1}'
        raise InvalidJobError([Problem(where, f"expected {expected}")], source=origin)
    wrong = [k for k, v in defaults.items() if type(v) not in _TYPES]
    if wrong:
        problems = [Problem(f"{where}.{k}", "expected a string, number or boolean") for k in wrong]
        raise InvalidJobError(problems, source=origin)
    return {str(k): v for k, v in defaults.items()}


def _bad_name(param: str) -> str:
    if not param.isidentifier() or keyword.iskeyword(param):
        return "not a Python identifier"
    if param in FIXED_INPUTS:
        return "the component already has an input of that name"
    return ""


def _ordered(inputs: Mapping[str, Any]) -> list[str]:
    """Required inputs first (Python's rule for defaults), each group by name."""
    return sorted(inputs, key=lambda param: (inputs[param] is not _REQUIRED, param))


def _signature(param: str, default: Any) -> str:
    if default is _REQUIRED:
        return f"{param}: str"
    return f"{param}: {_TYPES[type(default)]} = {default!r}"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise InvalidJobError([Problem("", f"cannot read: {err}")], source=str(path)) from None


def _job_name(text: str) -> str:
    metadata = load_job_text(text).get("metadata") or {}
    return str(metadata.get("name") or "")


def _identifier(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name).strip("_") or "job"
    return f"job_{cleaned}" if cleaned[0].isdigit() else cleaned


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
    )  # reason: a generated signature is the point
    return namespace[function]


def _decorate(func: Any) -> Any:
    from kfp import dsl

    from trainop_kfp.components import COMPONENT_OPTIONS

    return dsl.component(func, **COMPONENT_OPTIONS)
