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
