"""The soak (benchmarks/soak.py) as a test: deselected by default, `pytest -m soak` runs it.

    TRAINOP_SOAK_MINUTES=30 python -m pytest -m soak tests/stability/test_soak.py

It passes when the soak's verdict does: the operator's RSS flat over the second half, the operator
alive and ready at the end, every job ended the way it was meant to, none late, no pod left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINUTES = float(os.environ.get("TRAINOP_SOAK_MINUTES", "30"))

pytestmark = [pytest.mark.soak, pytest.mark.timeout(MINUTES * 60 + 900)]


def test_the_operator_under_churn_and_faults_keeps_flat_memory_and_loses_no_job(
    tmp_path: Path,
) -> None:
    result = tmp_path / "soak.json"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), f"--minutes={MINUTES:g}",
         f"--workdir={tmp_path / 'logs'}", f"--json={result}"],
        env=env, capture_output=True, text=True, timeout=MINUTES * 60 + 840, check=False,
    )  # fmt: skip
    assert result.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    verdict = json.loads(result.read_text())["verdict"]
    assert verdict["passed"], json.dumps(verdict, indent=2) + "\n" + done.stdout[-3000:]
    assert done.returncode == 0
