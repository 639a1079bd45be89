"""Layering: the core (planner, kinds, render) never imports flytekit, kfp, ray or kubernetes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("flytekit", "kfp", "ray", "kubernetes")
PROBE = """
import sys
import trainop_core, trainop_core.planner, trainop_core.kinds.table, trainop_core.gang
import trainop_core.decorators, trainop_core.cli.render_cmd
import trainop_core.client, trainop_core.backends, trainop_core.backends.process.kubelet
import trainop_core.cli.main; trainop_core.cli.main.build_parser()
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(",".join(loaded))
"""


def test_importing_the_core_loads_no_optional_framework() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *FORBIDDEN],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == ""


def test_every_runtimes_module_can_be_imported_first() -> None:
    """No import cycle between runtimes and the operator: each runtimes module, imported alone in
    a fresh interpreter, loads (a cycle shows only when one of its modules is imported first)."""
    modules = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in sorted((ROOT / "trainop_core").rglob("*.py"))
        if p.name != "__init__.py" and "testing" not in p.parts and p.name != "__main__.py"
    ]
    probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    failed = []
    for chunk in ("runtimes",):
        for module in [m for m in modules if f".{chunk}." in m]:
            result = subprocess.run(
                [sys.executable, "-c", probe, module], cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
            if result.returncode != 0:
                failed.append(f"{module}: {result.stderr.strip().splitlines()[-1]}")
    assert failed == []
