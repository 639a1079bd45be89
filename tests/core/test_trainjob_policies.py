"""What an ML policy decides for a TrainJob as Trainer v2.3 does: the env a TrainJob may not set
(each policy's reserved variables) and how many processes a node starts (numProcPerNode "auto")."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from builders import make_trainjob

from trainop_core.api.load import Document
from trainop_core.errors import InvalidJobError
from trainop_core.planner import KubernetesAddressing, Observed, plan
from trainop_core.runtimes.catalog import default_catalog
from trainop_core.runtimes.policies.table import builtin_policies
from trainop_core.runtimes.prepare import prepare_trainjob
from trainop_core.runtimes.processes import auto_processes

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def trainjob(runtime: str = "torch-distributed", **trainer: Any) -> dict[str, Any]:
    return make_trainjob("tj", runtime, "team", trainer=trainer)


def problems(data: dict[str, Any], runtimes: Any = None) -> dict[str, str]:
    with pytest.raises(InvalidJobError) as caught:
        prepare_trainjob(Document(data, "job.yaml"), runtimes)
    return {p.path: p.message for p in caught.value.problems}


def node_env(data: dict[str, Any], runtimes: Any = None) -> dict[str, str]:
    kind, job = prepare_trainjob(Document(data, ""), runtimes)
    job.metadata.uid = "uid-1"
    pods = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind)).create_pods
    node = next(p for p in pods if "-node-" in p["metadata"]["name"])
    main = next(c for c in node["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value", "") for e in main.get("env") or []}


# --- reserved env ---------------------------------------------------------------------------------

# Trainer v2.3's own lists (pkg/constants: TorchRunReservedEnvNames, XGBoostReservedEnvNames,
# MPIReservedEnvNames); trainop also reserves what it sets itself (jax's, mpi's rsh agent).
TRAINERS_LISTS = {
    "torch": {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
              "PET_MASTER_PORT"},
    "xgboost": {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"},
    "mpi": {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args",
            "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots"},
}  # fmt: skip
RESERVED = [
    ("torch-distributed", "PET_NNODES"),
    ("torch-distributed", "PET_NPROC_PER_NODE"),
    ("xgboost-distributed", "DMLC_TASK_ID"),
    ("jax-distributed", "JAX_PROCESS_ID"),
    ("mpi-distributed", "OMPI_MCA_orte_default_hostfile"),
    ("mpi-distributed", "OMPI_MCA_plm_rsh_agent"),
]


@pytest.mark.parametrize(
    ("runtime", "name"), RESERVED, ids=[f"{n} on {r} is refused" for r, n in RESERVED]
)
def test_env_a_policy_sets_is_refused_naming_the_entry(runtime: str, name: str) -> None:
    env = [{"name": "MINE", "value": "1"}, {"name": name, "value": "7"}]
    found = problems(trainjob(runtime, env=env))
    assert list(found) == ["spec.trainer.env[1].name"], found
    assert found["spec.trainer.env[1].name"].startswith("must not have reserved envs: ")
    assert name in found["spec.trainer.env[1].name"]


def test_every_reserved_entry_is_named() -> None:
    env = [{"name": "PET_NNODES", "value": "1"}, {"name": "PET_MASTER_PORT", "value": "1"}]
    found = problems(trainjob(env=env))
    assert list(found) == ["spec.trainer.env[0].name", "spec.trainer.env[1].name"], found


def test_a_variable_is_reserved_only_by_the_policy_that_sets_it(tmp_path: Path) -> None:
    prepare_trainjob(Document(trainjob(env=[{"name": "DMLC_TASK_ID", "value": "1"}]), ""))
    plain = next(r for r in default_catalog().runtimes if r.name == "torch-distributed")
    data = plain.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["metadata"]["name"], data["spec"]["mlPolicy"] = "plain", {"numNodes": 1}
    (tmp_path / "plain.yaml").write_text(json.dumps(data))
    job = trainjob("plain", env=[{"name": "PET_NNODES", "value": "9"}])
    assert node_env(job, tmp_path)["PET_NNODES"] == "9"  # no policy sets it: the job's own


@pytest.mark.parametrize("policy", sorted(TRAINERS_LISTS))
def test_trainers_reserved_lists_are_reserved_here(policy: str) -> None:
    assert TRAINERS_LISTS[policy] <= builtin_policies()[policy].reserved_env


@pytest.mark.parametrize("runtime", ["torch-distributed", "xgboost-distributed", "jax-distributed"])
def test_every_variable_of_a_policys_contract_is_reserved(runtime: str) -> None:
    # What the policy adds to the node container, against the same job on a policy-free runtime.
    policy = runtime.split("-")[0]
    contract = set(node_env(trainjob(runtime, numNodes=2))) - {"TRAINOP_REPLICA_INDEX"}
    others = {n for p, r in builtin_policies().items() if p != policy for n in r.reserved_env}
    assert contract - others <= builtin_policies()[policy].reserved_env
    assert builtin_policies()[policy].reserved_env <= contract


def test_trainop_validate_refuses_a_reserved_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainop_core.cli.main import main

    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(trainjob(env=[{"name": "PET_NODE_RANK", "value": "0"}])))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: TrainJob/tj: spec.trainer.env[0].name: must not have reserved envs" in err


def test_the_local_backend_refuses_it_before_creating_anything(tmp_path: Path) -> None:
    from trainop_core.client import TrainingClient

    client = TrainingClient(backend="local", home=tmp_path)
    with pytest.raises(InvalidJobError, match=r"spec\.trainer\.env\[0\]\.name"):
        client.create(trainjob(env=[{"name": "PET_MASTER_ADDR", "value": "x"}]))
    assert client.list(None) == []


# --- processes per node ---------------------------------------------------------------------------

# Trainer v2.3's torch plugin table (pkg/runtime/framework/plugins/torch/torch_test.go: the
# TrainJob's resourcesPerNode requests -> PET_NPROC_PER_NODE), GPUs counted here (see
# trainop_core/runtimes/processes.py), then limits against requests.
AUTO = [
    ({"requests": {"cpu": "4"}}, 4),
    ({}, 1),
    ({"requests": {"cpu": "2"}}, 2),
    ({"requests": {"cpu": "3"}}, 3),
    ({"requests": {"cpu": "2.5"}}, 3),
    ({"requests": {"cpu": "0.7"}}, 1),
    ({"requests": {"example.com/gpu": "2"}}, 2),
    ({"requests": {"cpu": "2500m"}}, 3),
    ({"requests": {"cpu": "6", "example.com/gpu": "2"}}, 2),
    ({"requests": {"cpu": "3.7"}}, 4),
    ({"requests": {"cpu": "8", "memory": "16Gi", "example.com/gpu": "4"}}, 4),
    ({"limits": {"cpu": "4"}}, 4),
    ({"requests": {"cpu": "1"}, "limits": {"cpu": "4"}}, 1),
    ({"requests": {"cpu": "0"}, "limits": {"cpu": "2"}}, 2),
    ({"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}, 1),
    ({"requests": {"nvidia.com/gpu": "0"}, "limits": {"nvidia.com/gpu": "3"}}, 3),
    ({"requests": {"cpu": "1e40"}}, 2**31 - 1),
]


@pytest.mark.parametrize(
    ("resources", "count"), AUTO, ids=[f"{json.dumps(r)} starts {n}" for r, n in AUTO]
)
def test_auto_counts_processes_from_the_nodes_resources_as_trainer(
    resources: dict[str, Any], count: int
) -> None:
    assert auto_processes(resources) == count


def test_a_torch_trainjob_without_a_count_starts_one_process_per_gpu_it_asks_for() -> None:
    # The Kubeflow SDK's CustomTrainer(resources_per_node={"gpu": 2}) never sets numProcPerNode.
    gpus = {"nvidia.com/gpu": "2"}
    env = node_env(trainjob(resourcesPerNode={"requests": gpus, "limits": gpus}))
    assert env["PET_NPROC_PER_NODE"] == "2"
    assert (
        node_env(trainjob(resourcesPerNode={"requests": {"cpu": "3"}}))["PET_NPROC_PER_NODE"] == "3"
    )
    assert node_env(trainjob())["PET_NPROC_PER_NODE"] == "1"  # no resources: one


def test_the_runtimes_node_resources_count_unless_the_trainjob_gives_its_own(
    tmp_path: Path,
) -> None:
    torch = next(r for r in default_catalog().runtimes if r.name == "torch-distributed")
    data = torch.model_dump(by_alias=True, exclude_none=True, mode="json")
    data["metadata"]["name"] = "gpus"
    node = data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    node["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    (tmp_path / "gpus.yaml").write_text(json.dumps(data))
    assert node_env(trainjob("gpus"), tmp_path)["PET_NPROC_PER_NODE"] == "4"
    # resourcesPerNode replaces the runtime's resources whole, as in Trainer
    mine = trainjob("gpus", resourcesPerNode={"requests": {"cpu": "2"}})
    assert node_env(mine, tmp_path)["PET_NPROC_PER_NODE"] == "2"
    assert node_env(trainjob("gpus", numProcPerNode=3), tmp_path)["PET_NPROC_PER_NODE"] == "3"


def test_only_torch_counts_processes_from_resources() -> None:
    cpus = {"requests": {"cpu": "4"}}
    _, mpi = prepare_trainjob(Document(trainjob("mpi-distributed", resourcesPerNode=cpus), ""))
    assert mpi.spec.num_proc_per_node == 1  # the runtime's mpi.numProcPerNode: the slots
    _, jax = prepare_trainjob(Document(trainjob("jax-distributed", resourcesPerNode=cpus), ""))
    assert jax.spec.num_proc_per_node == 1
