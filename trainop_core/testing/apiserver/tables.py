"""Server-side printing (``meta.k8s.io/v1`` ``Table``) as ``kubectl get`` requests it."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from .events import Obj
from .resources import ResourceType

# One step of a printer column's JSONPath: `.name`, `[3]`, `[-1:]` (the forms CRDs use).
_STEP = re.compile(r"\.?([^.\[\]]+)|\[(-?\d*)(:?)(-?\d*)\]")


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    seconds = int((datetime.now(timezone.utc) - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def json_path(obj: Any, path: str) -> Any:
    """Evaluate a printer column's JSONPath; a slice yields its last element (`[-1:]`)."""
    for match in _STEP.finditer(path):
        name, start, colon, stop = match.groups()
        if name is not None:
            obj = obj.get(name) if isinstance(obj, dict) else None
        elif isinstance(obj, list):
            obj = _index(obj, start, colon, stop)
        else:
            obj = None
        if obj is None:
            return None
    return obj


def _index(items: list[Any], start: str, colon: str, stop: str) -> Any:
    if not colon:
        i = int(start or 0)
        return items[i] if -len(items) <= i < len(items) else None
    chosen = items[int(start) if start else None : int(stop) if stop else None]
    return chosen[-1] if chosen else None


def _cell(obj: Obj, kind: str, path: str | None) -> Any:
    value = json_path(obj, path) if path else None
    if kind == "date" and isinstance(value, str):
        return _age(value)
    return value


def _pod_cells(pod: Obj) -> list[Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    phase = pod.get("status", {}).get("phase", "")
    if pod["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [f"{ready}/{total}", phase, restarts]


def _columns(rt: ResourceType) -> list[tuple[str, str, str | None]]:
    """``(name, type, jsonPath)`` after Name; jsonPath None for computed columns.

    As the real server does, a CRD's declared printer columns replace the default Age column.
    """
    if rt.plural == "pods" and not rt.group:
        return [
            ("Ready", "string", None),
            ("Status", "string", None),
            ("Restarts", "integer", None),
            ("Age", "date", ".metadata.creationTimestamp"),
        ]
    declared = [(c["name"], c.get("type", "string"), c.get("jsonPath")) for c in rt.printer_columns]
    return declared or [("Age", "date", ".metadata.creationTimestamp")]


def as_table(rt: ResourceType, items: list[Obj], rv: str, continue_token: str = "") -> Obj:
    extra = _columns(rt)
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}
    ]
    definitions += [
        {
            "name": name,
            "type": "string" if kind == "date" else kind,
            "format": "",
            "description": "",
            "priority": 0,
        }
        for name, kind, _ in extra
    ]
    rows = []
    for obj in items:
        cells = [_cell(obj, kind, path) for _, kind, path in extra]
        if rt.plural == "pods" and not rt.group:
            cells[:3] = _pod_cells(obj)
        rows.append(
            {
                "cells": [obj["metadata"]["name"], *cells],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj["metadata"],
                },
            }
        )
    metadata = {"resourceVersion": rv}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
