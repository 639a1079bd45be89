"""How autodoc shows the objects that it would otherwise show badly.

- A pydantic model (the job models, the decorator configuration): its generated `__init__`
  signature is a wall of `FieldInfo(...)` reprs; instead the class gets no signature and a list
  of its fields, each with its wire name (what a YAML file spells), Python name and type. A
  dataclass of more than `LONG` fields (a `Kind`) gets the same list instead of its signature.
- An annotation Python could not evaluate (a name imported only under `TYPE_CHECKING`, to
  break an import cycle) stays a bare name such as `Kind`, which Sphinx cannot tell from other
  documented objects of the same name: each such name is written out in full, from the module's
  own imports.
- A dataclass field made by a default factory has the default `<factory>`, which Sphinx's
  signature parser cannot read (it then splits `dict[str, float]` at its comma): shown as `...`.
- A KFP component (`trainop_kfp.run_training_job`, `trainop_run`): a `PythonComponent` object
  whose own docstring and `(*args, **kwargs)` signature are kfp's; the function it wraps carries
  the real ones.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
import typing
from types import ModuleType
from typing import Any

from sphinx.application import Sphinx
from sphinx.util.typing import stringify_annotation

LONG = 6


def _is_model(obj: Any) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover - pydantic is a core dependency
        return False
    return inspect.isclass(obj) and issubclass(obj, BaseModel)


def _is_long_dataclass(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and len(dataclasses.fields(obj)) > LONG


def _component_function(obj: Any) -> Any:
    """The Python function a KFP component wraps, or None for anything else."""
    func = getattr(obj, "python_func", None)
    return func if callable(func) and hasattr(obj, "component_spec") else None


def _signature(
    app: Sphinx,
    what: str,
    name: str,
    obj: Any,
    options: Any,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:
    if what == "class" and (_is_model(obj) or _is_long_dataclass(obj)):
        return "", None
    if signature and "<factory>" in signature:
        signature = signature.replace("<factory>", "...")
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    if module is not None and (signature or return_annotation):
        names = _module_names(module)
        return _qualify(signature, names), _qualify(return_annotation, names)
    func = _component_function(obj)
    if func is not None:
        sig = inspect.signature(func).replace(return_annotation=inspect.Signature.empty)
        return str(sig), None
    return None


_NAME = re.compile(r"(?<![\w.~])([A-Za-z_]\w*)")


def _qualify(text: str | None, names: dict[str, str]) -> str | None:
    if not text:
        return text
    return _NAME.sub(lambda m: names.get(m[1], m[1]), text)


def _module_names(module: ModuleType) -> dict[str, str]:
    """Bare name -> full name of the classes a module imports, `TYPE_CHECKING` imports too."""
    names = {
        name: f"{value.__module__}.{value.__qualname__}"
        for name, value in vars(module).items()
        if inspect.isclass(value) and not value.__module__.startswith("builtins")
    }
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in ast.walk(node):
                if isinstance(child, ast.ImportFrom) and child.module:
                    for alias in child.names:
                        names[alias.asname or alias.name] = f"{child.module}.{alias.name}"
    return names


def _docstring(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    func = _component_function(obj)
    if func is not None:
        lines[:] = inspect.cleandoc(func.__doc__ or "").splitlines()
    if what == "class" and _is_model(obj):
        lines.extend(_model_fields(obj))
    elif what == "class" and _is_long_dataclass(obj):
        lines.extend(_dataclass_fields(obj))


def _model_fields(model: Any) -> list[str]:
    out = ["", "Fields (the wire name, then the Python name where it differs):", ""]
    for python_name, info in model.model_fields.items():
        wire = info.alias or python_name
        kind = stringify_annotation(info.annotation, "smart")
        named = f"``{wire}``" if wire == python_name else f"``{wire}`` (``{python_name}``)"
        out.append(f"- {named}: ``{kind}``")
    return [*out, ""] if model.model_fields else []


def _dataclass_fields(cls: Any) -> list[str]:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation only a type checker resolves: show it as written
        hints = {}
    out = ["", "Fields:", ""]
    for field in dataclasses.fields(cls):
        kind = hints.get(field.name, field.type)
        shown = kind if isinstance(kind, str) else stringify_annotation(kind, "smart")
        out.append(f"- ``{field.name}``: ``{shown}``")
    return [*out, ""]


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-signature", _signature)
    app.connect("autodoc-process-docstring", _docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
