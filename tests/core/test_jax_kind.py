"""JAXJob is the fifth kind: proof that a kind is one small module plus one line in the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, T0
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import load_job
from trainop_core.kinds import jax
from trainop_core.kinds.table import build_registry
from trainop_core.planner import KubernetesAddressing, Observed, plan

PACKAGE = Path(jax.__file__).resolve().parents[1]


def test_the_jax_module_is_small() -> None:
    assert len(Path(jax.__file__).read_text().splitlines()) < 90


def test_nothing_outside_its_module_and_the_table_line_knows_about_jax() -> None:
    mentions = [
        (str(path.relative_to(PACKAGE)), line.strip())
        for path in PACKAGE.rglob("*.py")
        if path != Path(jax.__file__).resolve()
        # Trainer v2's API names its jax ML policy itself (trainop_core.runtimes has its own table)
        and path.relative_to(PACKAGE).parts[0] != "runtimes"
        and not path.name.startswith("trainjob")
        for line in path.read_text().splitlines()
        if "jax" in line.lower()
    ]
    assert mentions == [
        (
            "kinds/table.py",
            "from trainop_core.kinds import jax, mpi, mxnet, paddle, pytorch, tensorflow, xgboost",
        ),
        ("kinds/table.py", "jax.KIND,  # the fifth kind: its module plus this line"),
    ]


def jax_job(replicas: int = 3) -> TrainingJob:
    b = make_job("JAXJob", "jx", replica_field="jaxReplicaSpecs", container="jax")
    return load_job(b.workers(replicas).build(), registry=REGISTRY)


@pytest.mark.parametrize("index", [0, 2], ids=["worker 0 coordinates", "worker 2 joins"])
def test_jax_workers_get_the_coordinator_env(index: int) -> None:
    job = jax_job()
    kind = REGISTRY.get("JAXJob")
    first = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind))
    pod = next(p for p in first.create_pods if p["metadata"]["name"] == f"jx-worker-{index}")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jx-worker-0",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "3",
        "PROCESS_ID": str(index),
    }


def test_a_registry_without_jax_can_take_it_as_an_extra_kind() -> None:
    four = build_registry(entry_points=False).select(["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
    assert "JAXJob" not in four
    with_jax = build_registry(entry_points=False, extra=()).select(["jaxjob"])
    assert with_jax.get("jaxjob") is jax.KIND
