"""The examples really train across the nodes of a Ray cluster: every kind, unchanged YAML,
the job's directory shipped with runtime_env working_dir (MXNet: its venv is too big to ship,
so it runs from the shared filesystem, as on a cluster with NFS)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_helpers import addresses, assert_on_two_nodes

from trainop_core.client import TrainingClient, is_succeeded, job_state

ROOT = Path(__file__).resolve().parents[2]
STRATEGY = "ray.trainop.dev/placement-strategy"


def _expectations() -> dict[str, dict[str, Any]]:
    path = ROOT / "tests" / "examples_support" / "expectations.py"
    spec = importlib.util.spec_from_file_location("expectations", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    examples: dict[str, dict[str, Any]] = module.EXAMPLES
    return examples


EXPECTED = _expectations()
TRAINING = [
    pytest.param("examples/pytorch/ddp.yaml", marks=pytest.mark.slow, id="PyTorch DDP"),
    # The same training as a Kubeflow Trainer v2 TrainJob (torchrun, PET_* with node IPs).
    pytest.param("examples/pytorch/ddp-trainjob.yaml", marks=pytest.mark.slow, id="TrainJob DDP"),
    # Every shipped runtime's TrainJob: xgboost-distributed (DMLC_* with node 0's address) and
    # jax-distributed (JAX_COORDINATOR_ADDRESS on node 0, gloo collectives across the nodes).
    pytest.param(
        "examples/xgboost/dist-trainjob.yaml", marks=pytest.mark.slow, id="TrainJob XGBoost"
    ),
    pytest.param("examples/jax/logreg-trainjob.yaml", marks=pytest.mark.slow, id="TrainJob JAX"),
    pytest.param("examples/jax/logreg.yaml", marks=pytest.mark.slow, id="JAXJob"),
    pytest.param("examples/tensorflow/mwms.yaml", marks=pytest.mark.slow, id="TensorFlow MWMS"),
    pytest.param("examples/xgboost/dist.yaml", marks=pytest.mark.slow, id="XGBoost collective"),
    pytest.param("examples/paddle/collective.yaml", marks=pytest.mark.slow, id="Paddle collective"),
    # mpirun on the launcher's node starts each rank on its worker's node, through the worker's
    # actor (trainop_core.backends.ray.rsh): the ranks' collective crosses the nodes.
    pytest.param("examples/mpi/logreg.yaml", marks=pytest.mark.slow, id="MPI ranks on workers"),
    # The same as a TrainJob on mpi-distributed: the launcher's mpirun, a rank on each node.
    pytest.param("examples/mpi/logreg-trainjob.yaml", marks=pytest.mark.slow, id="TrainJob MPI"),
]


def _run_example(cluster: Any, client: TrainingClient, example: str) -> None:
    """Run the example's YAML as it is, plus one annotation asking Ray to spread its replicas
    over the nodes (PACK, the default, would put a 2-replica job on one 2-CPU node)."""
    expected = EXPECTED[example]
    job = yaml.safe_load((ROOT / example).read_text())
    job["metadata"].setdefault("annotations", {})[STRATEGY] = "SPREAD"
    created = client.create(job, workdir=(ROOT / example).parent)
    finished = client.wait(created.name, created.namespace, timeout=expected["timeout_s"] * 3)
    logs = list(client.logs(created.name, created.namespace, follow=True))
    text = "\n".join(f"{line.replica} | {line.text}" for line in logs)
    assert is_succeeded(finished), f"{job_state(finished)}: {finished.status}\n{text[-3000:]}"
    for pattern in expected["must_match"]:
        plain = "\n".join(line.text for line in logs)
        assert re.search(pattern, plain, re.MULTILINE), f"{pattern!r} not in:\n{text[-3000:]}"
    client.delete(created.name, created.namespace)
    assert_on_two_nodes(cluster, addresses(finished))


@pytest.mark.parametrize("example", TRAINING)
def test_example_trains_across_nodes(
    ray_cluster: Any, upload_client: TrainingClient, example: str
) -> None:
    _run_example(ray_cluster, upload_client, example)


@pytest.mark.slow
@pytest.mark.mxnet
def test_mxnet_parameter_server_trains_across_nodes(
    ray_cluster: Any, client: TrainingClient, mxnet_venv: Path
) -> None:
    _run_example(ray_cluster, client, "examples/mxnet/ps.yaml")
