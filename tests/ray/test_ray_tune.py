"""Ray Tune over jobs on the Ray backend: each trial's job gets its own placement group on the
same cluster as the trials, without starving Tune's own resource accounting."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_helpers import leftovers, py, until

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tune_trials_run_their_jobs_in_placement_groups_of_their_own(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """Two trials of a 2-replica job on 4 CPUs: each trial's function holds 0.25 CPU (Tune's
    accounting), its job's placement group 2 x 1 CPU (trainop's). Tune starts both trials (by
    its count 0.5 of 4 CPUs are used), but only one job fits at a time: the other waits for the
    cluster to free up instead of deadlocking it, and both trials finish."""
    from trainop_hpo.results import STATE_KEY
    from trainop_hpo.tune import tune_job

    spans = tmp_path / "spans"  # each job's master appends when it starts and ends
    template = yaml.safe_load((ROOT / "examples" / "hpo" / "quadratic.yaml").read_text())
    specs = template["spec"]["pytorchReplicaSpecs"]
    master = specs["Master"]["template"]["spec"]["containers"][0]
    master["resources"] = {"requests": {"cpu": "1"}}
    master["command"] = py(f"""
        import subprocess, sys, time
        open({str(spans)!r}, "a").write(f"{{time.time()}} start\\n")
        code = subprocess.call([sys.executable, "quadratic.py", *sys.argv[1:]])
        open({str(spans)!r}, "a").write(f"{{time.time()}} end\\n")
        sys.exit(code)
    """)
    worker = {**master, "command": ["python", "quadratic.py"]}
    worker["args"] = ["--lr", "0", "--steps", "1", "--sleep", "0"]
    specs["Worker"] = {"replicas": 1, "template": {"spec": {"containers": [worker]}}}
    (tmp_path / "quadratic.yaml").write_text(yaml.safe_dump(template))
    shutil.copy(ROOT / "examples" / "hpo" / "quadratic.py", tmp_path)
    grid = tune_job(
        tmp_path / "quadratic.yaml",
        {"lr": "grid:0.01,0.3"},
        "loss",
        "min",
        backend="ray",
        resources_per_trial={"cpu": 0.25},
        storage_path=tmp_path / "tune",
    )
    states = sorted(result.metrics.get(STATE_KEY, "?") for result in grid)
    assert [r.error for r in grid] == [None] * 2
    assert states == ["Succeeded"] * 2
    assert grid.get_best_result().config["lr"] == 0.01
    events = sorted(line.split() for line in spans.read_text().splitlines())
    assert [kind for _, kind in events] == ["start", "end", "start", "end"]  # one at a time
    until(lambda: not leftovers("no-tag"), what="every trial's job deleted")
