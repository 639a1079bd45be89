"""An mpi TrainJob on this machine beyond the shipped example (examples/mpi/logreg-trainjob.yaml,
run by tests/test_examples.py): a runtime with runLauncherAsNode, where the launcher hosts a
rank itself and numNodes counts it, really training with mpi4py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.runtimes.catalog import DEFAULTS_DIR

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mpi" / "logreg-trainjob.yaml"


@pytest.mark.slow
def test_run_launcher_as_node_puts_a_rank_in_the_launcher(
    client: TrainingClient, tmp_path: Path
) -> None:
    runtime = yaml.safe_load((DEFAULTS_DIR / "mpi-distributed.yaml").read_text())
    runtime["metadata"]["name"] = "mpi-launcher-as-node"
    runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = True
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    (runtimes / "mpi.yaml").write_text(json.dumps(runtime))
    job = yaml.safe_load(EXAMPLE.read_text())
    job["spec"]["runtimeRef"]["name"] = "mpi-launcher-as-node"  # numNodes: 2, mpirun -np 2

    created = client.create(job, workdir=EXAMPLE.parent, runtimes=runtimes)
    finished = client.wait(created.name, created.namespace, timeout=240)
    text = "\n".join(line.text for line in client.logs(created.name, created.namespace))

    assert is_succeeded(finished), f"{job_state(finished)}: {finished.status}\n{text[-3000:]}"
    counts = {rtype: spec.replicas for rtype, spec in finished.spec.replica_specs.items()}
    assert counts == {"Launcher": 1, "Node": 1}  # the launcher is one of the 2 nodes
    assert "world_size=2 replica=mpi-logreg-trainjob-launcher" in text
    assert "world_size=2 replica=mpi-logreg-trainjob-node-0" in text
    assert "rank=1 weights_identical=True" in text
