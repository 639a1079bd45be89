"""Where a job built in code contains itself: the field path of the value that refers back.

A job built in Python (a mapping, or a job model whose pod template is a plain dict) can hold a
value that contains itself; no wire format can, and the model cannot even be dumped. The walk
here names the field where the loop closes and the field it leads back to, in wire names
(`spec.tfReplicaSpecs.Worker.template.metadata.loop`), so the refusal says where to look.
Iterative, and every container is entered once: any shape costs bounded stack and time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from trainop_core.api.podtemplate import join
from trainop_core.errors import Problem


def cycle_problem(root: Any) -> Problem | None:
    """The first place where `root` contains itself, as a Problem naming the field; None if
    nothing in it refers back to a value that contains it."""
    open_paths: dict[int, str] = {}  # containers on the current path -> their field path
    done: set[int] = set()
    stack: list[tuple[Any, str, bool]] = [(root, "", False)]
    while stack:
        node, path, leaving = stack.pop()
        if leaving:
            del open_paths[id(node)]
            done.add(id(node))
            continue
        if not _is_container(node) or id(node) in done:
            continue
        if id(node) in open_paths:
            back = open_paths[id(node)] or "the job itself"
            return Problem(path, f"contains itself (refers back to {back})")
        open_paths[id(node)] = path
        stack.append((node, path, True))
        stack.extend((child, where, False) for where, child in _children(node, path))
    return None


def _is_container(node: Any) -> bool:
    return isinstance(node, Mapping | list | tuple | BaseModel)


def _children(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, BaseModel):
        for name, field in type(node).model_fields.items():
            yield join(path, field.alias or name), getattr(node, name, None)
        for key, value in (node.model_extra or {}).items():
            yield join(path, str(key)), value
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield join(path, str(key)), value
    else:
        for index, value in enumerate(node):
            yield f"{path}[{index}]", value
