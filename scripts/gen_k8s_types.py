"""Regenerate trainop_core/api/k8s_types.json from the official kubernetes client's models.

The table lets the core validate pod templates (field names and value shapes, with paths) without
importing the `kubernetes` package at run time. Run after upgrading the client:

    python scripts/gen_k8s_types.py

A test checks the committed table still matches the installed client.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOTS = ("V1PodTemplateSpec", "V1ObjectMeta")
OUT = Path(__file__).resolve().parent.parent / "trainop_core" / "api" / "k8s_types.json"


def _model(name: str) -> Any:
    import kubernetes.client as k8s

    return getattr(k8s, name)


def collect(roots: tuple[str, ...] = ROOTS) -> dict[str, dict[str, str]]:
    """Every model reachable from the roots as {jsonField: type}, in the client's notation."""
    table: dict[str, dict[str, str]] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in table:
            continue
        cls = _model(name)
        fields = {cls.attribute_map[attr]: typ for attr, typ in cls.openapi_types.items()}
        table[name] = dict(sorted(fields.items()))
        todo.extend(re.findall(r"V\d\w+", " ".join(fields.values())))
    return dict(sorted(table.items()))


def main() -> int:
    OUT.write_text(json.dumps(collect(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
