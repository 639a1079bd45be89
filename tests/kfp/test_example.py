"""examples/kfp/pipeline.py is executed, not just shipped: it compiles, and runs under kfp.local."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp_support import wait_until_no_processes

from trainop_core.client import TrainingClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kfp" / "pipeline.py"


def run_example(*args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_example_compiles_to_a_pipeline_file(tmp_path: Path) -> None:
    output = tmp_path / "ddp.yaml"

    run_example("--output", str(output), timeout=120)

    ir = yaml.safe_load(output.read_text())
    assert ir["pipelineInfo"]["name"] == "pytorch-ddp-digits"
    assert set(ir["root"]["inputDefinitions"]["parameters"]) == {
        "epochs", "lr", "backend", "workdir"
    }  # fmt: skip


@pytest.mark.slow
def test_the_example_trains_under_kfp_local(tmp_path: Path, tag: str) -> None:
    out = run_example("--local", "--epochs", "2", "--pipeline-root", str(tmp_path), timeout=300)

    pairs = [re.fullmatch(r"(\w+)=(\S+)", line) for line in out.splitlines()]
    metrics = dict(pair.groups() for pair in pairs if pair)  # the example's own summary lines
    assert float(metrics["world_size"]) == 3  # 1 Master + 2 Workers
    assert 0.0 < float(metrics["test_accuracy"]) <= 1.0
    assert TrainingClient().list() == []
    assert wait_until_no_processes(tag) == []
