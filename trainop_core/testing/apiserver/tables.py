"""Server-side printing (``meta.k8s.io/v1`` ``Table``) as ``kubectl get`` requests it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .events import Obj
from .resources import ResourceType
from .scale import get_path


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
    """``(name, type, jsonPath)``; jsonPath None for computed columns."""
    if rt.plural == "pods" and not rt.group:
        return [
            ("Ready", "string", None),
            ("Status", "string", None),
            ("Restarts", "integer", None),
        ]
    return [
        (c["name"], c.get("type", "string"), c.get("jsonPath", "").lstrip("."))
        for c in rt.printer_columns
    ]


def as_table(rt: ResourceType, items: list[Obj], rv: str, continue_token: str = "") -> Obj:
    extra = _columns(rt)
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}
    ]
    definitions += [
        {"name": name, "type": kind, "format": "", "description": "", "priority": 0}
        for name, kind, _ in extra
    ]
    definitions.append(
        {"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}
    )
    rows = []
    for obj in items:
        if rt.plural == "pods" and not rt.group:
            cells = _pod_cells(obj)
        else:
            cells = [get_path(obj, path) if path else None for _, _, path in extra]
        rows.append(
            {
                "cells": [
                    obj["metadata"]["name"],
                    *cells,
                    _age(obj["metadata"].get("creationTimestamp")),
                ],
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
