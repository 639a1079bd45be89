"""The mpi ML policy: a runtime's launcher and node steps, the hostfile, the launcher's contract and
the job's state following the launcher; bad mpi fields named. Plan-in/plan-out, no I/O."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from builders import make_trainjob

from trainop_core.api.load import Document
from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.base import (
    CONFIGMAP_DIR_OPTION,
    EXEC_AGENT_OPTION,
    ReplicaCounts,
    Verdict,
)
from trainop_core.planner import KubernetesAddressing, Observed, PlanOptions, plan
from trainop_core.runtimes.catalog import default_catalog
from trainop_core.runtimes.kind import KIND
from trainop_core.runtimes.prepare import prepare_trainjob

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
COMMAND = ["mpirun", "python", "train.py"]


def trainjob(runtime: str = "mpi-distributed", **trainer: Any) -> dict[str, Any]:
    return make_trainjob("tj", runtime, "team", trainer={"command": COMMAND, **trainer})


def mpi_runtime() -> dict[str, Any]:
    shipped = next(r for r in default_catalog().runtimes if r.name == "mpi-distributed")
    data: dict[str, Any] = shipped.model_dump(by_alias=True, exclude_none=True, mode="json")
    return data


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidJobError) as caught:
        parse_v2(data)
    return {p.path: p.message for p in caught.value.problems}


def first_plan(data: dict[str, Any], runtimes: Path | None = None, **options: Any) -> Any:
    kind, job = prepare_trainjob(Document(data, ""), runtimes)
    job.metadata.uid = "uid-1"
    opts = PlanOptions(kind_options=options) if options else PlanOptions()
    return plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind), opts)


def by_name(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in pods}


def node_container(pod: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    return found


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in node_container(pod).get("env") or []}


# --- validation ----------------------------------------------------------------------------------

BAD_MPI = [
    ({"numProcPerNode": 0}, "spec.mlPolicy.mpi.numProcPerNode", "at least 1"),
    ({"mpiImplementation": "LAM"}, "spec.mlPolicy.mpi.mpiImplementation", "expected one of"),
    # Trainer v2.3's enum is OpenMPI (or "" for it): Intel and MPICH are refused.
    ({"mpiImplementation": "MPICH"}, "spec.mlPolicy.mpi.mpiImplementation", "one of OpenMPI"),
]


@pytest.mark.parametrize(
    ("mpi", "path", "says"), BAD_MPI, ids=[f"{next(iter(c[0]))} is refused" for c in BAD_MPI]
)
def test_a_bad_mpi_field_is_named(mpi: dict[str, Any], path: str, says: str) -> None:
    data = mpi_runtime()
    data["spec"]["mlPolicy"]["mpi"].update(mpi)
    found = problems_of(data)
    assert path in found and says in found[path], found


def test_an_mpi_runtime_without_a_launcher_step_is_named() -> None:
    data = mpi_runtime()
    jobs = data["spec"]["template"]["spec"]["replicatedJobs"]
    jobs[:] = [j for j in jobs if j["name"] != "launcher"]
    found = problems_of(data)
    assert 'named "launcher"; found 0' in found["spec.template.spec.replicatedJobs"]


def test_an_mpi_runtime_with_another_step_is_named() -> None:
    data = mpi_runtime()
    jobs = data["spec"]["template"]["spec"]["replicatedJobs"]
    jobs.append(dict(copy.deepcopy(jobs[1]), name="initializer"))
    found = problems_of(data)
    assert "launcher and node steps" in found["spec.template.spec.replicatedJobs[2].name"]


def test_the_launcher_step_needs_a_node_container() -> None:
    data = mpi_runtime()
    launcher = data["spec"]["template"]["spec"]["replicatedJobs"][0]
    launcher["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "mpi"
    found = problems_of(data)
    path = "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers"
    assert 'needs a container named "node"' in found[path]


def test_trainer_s_own_mpi_runtime_shape_is_accepted() -> None:
    """Trainer's deepspeed-distributed layout: nodes named "node", the launcher labelled as the
    trainer step, sshAuthMountPath set (accepted; trainop's rsh agent needs no keys)."""
    data = mpi_runtime()
    data["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] = "/home/mpiuser/.ssh"
    data["spec"]["template"]["spec"]["replicatedJobs"].reverse()
    parse_v2(data)


# --- translation and planning --------------------------------------------------------------------


def test_the_launcher_runs_the_command_and_the_nodes_host_the_ranks() -> None:
    first = first_plan(trainjob(numNodes=3, numProcPerNode=2, image="me/mpi:1"))
    pods = by_name(first.create_pods)
    assert sorted(pods) == ["tj-launcher", "tj-node-0", "tj-node-1", "tj-node-2"]
    launcher = node_container(pods["tj-launcher"])
    assert (launcher["command"], launcher["image"]) == (COMMAND, "me/mpi:1")
    for index in range(3):
        node = node_container(pods[f"tj-node-{index}"])
        assert (node["command"], node["args"], node["image"]) == (["sleep"], ["365d"], "me/mpi:1")
    env = env_of(pods["tj-launcher"])
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"


def test_the_hostfile_lists_every_node_with_num_proc_per_node_slots() -> None:
    first = first_plan(trainjob(numNodes=2, numProcPerNode=4))
    (config,) = [o for o in first.apply_objects if o["kind"] == "ConfigMap"]
    assert config["metadata"]["name"] == "tj-mpi-hostfile"
    assert config["data"]["hostfile"] == "tj-node-0 slots=4\ntj-node-1 slots=4\n"
    assert "--container node" in config["data"]["kubexec.sh"]


def test_the_runtime_s_num_proc_per_node_is_the_default_slots(tmp_path: Path) -> None:
    data = mpi_runtime()
    data["metadata"]["name"] = "mpi-3"
    data["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = 3
    (tmp_path / "mpi.yaml").write_text(json.dumps(data))
    first = first_plan(trainjob("mpi-3", numNodes=1), tmp_path)
    (config,) = [o for o in first.apply_objects if o["kind"] == "ConfigMap"]
    assert config["data"]["hostfile"] == "tj-node-0 slots=3\n"


def test_the_sdk_reads_a_launcher_step_and_node_steps() -> None:
    pods = by_name(first_plan(trainjob(numNodes=2)).create_pods)
    launcher = pods["tj-launcher"]["metadata"]["labels"]
    assert launcher["jobset.sigs.k8s.io/replicatedjob-name"] == "launcher"
    assert launcher["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    node = pods["tj-node-1"]["metadata"]["labels"]
    assert node["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert node["batch.kubernetes.io/job-completion-index"] == "1"
    assert "trainer.kubeflow.org/trainjob-ancestor-step" not in node


def test_on_a_process_backend_the_launcher_waits_for_the_nodes() -> None:
    options = {EXEC_AGENT_OPTION: "/agent", CONFIGMAP_DIR_OPTION: "/cm"}
    pods = by_name(first_plan(trainjob(numNodes=2), **options).create_pods)
    assert sorted(pods) == ["tj-node-0", "tj-node-1"]


def test_the_launcher_s_end_is_the_job_s_and_its_nodes_are_stopped() -> None:
    _, job = prepare_trainjob(Document(trainjob(numNodes=2), ""))
    assert job.spec.run_policy.clean_pod_policy == "Running"

    def states(counts: dict[str, ReplicaCounts]) -> list[str]:
        verdicts = KIND.status(job, counts, False)
        return [v.state for v in ([verdicts] if isinstance(verdicts, Verdict) else verdicts)]

    # The nodes still run (they only host ranks): the launcher's success is the job's.
    done = {"Launcher": ReplicaCounts(1, succeeded=1), "Node": ReplicaCounts(2, active=2)}
    assert states(done)[-1] == "Succeeded"
    failed = {"Launcher": ReplicaCounts(1, failed=1), "Node": ReplicaCounts(2, active=2)}
    assert "Failed" in states(failed)


def test_run_launcher_as_node_counts_the_launcher_among_the_nodes(tmp_path: Path) -> None:
    """Trainer's rule: numNodes - 1 node pods (at least 1), the launcher first in the hostfile
    (on Kubernetes its hostname is its pod's name, so mpirun starts its ranks in place)."""
    data = mpi_runtime()
    data["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] = True
    (tmp_path / "mpi.yaml").write_text(json.dumps(data))
    first = first_plan(trainjob(numNodes=3, numProcPerNode=2), tmp_path)
    assert sorted(by_name(first.create_pods)) == ["tj-launcher", "tj-node-0", "tj-node-1"]
    (config,) = [o for o in first.apply_objects if o["kind"] == "ConfigMap"]
    assert (
        config["data"]["hostfile"] == "tj-launcher slots=2\ntj-node-0 slots=2\ntj-node-1 slots=2\n"
    )
    one = first_plan(trainjob(numNodes=1), tmp_path)
    assert sorted(by_name(one.create_pods)) == ["tj-launcher", "tj-node-0"]


def test_a_torch_trainjob_plans_no_launcher_objects() -> None:
    first = first_plan(trainjob("torch-distributed", numNodes=2))
    assert sorted(by_name(first.create_pods)) == ["tj-node-0", "tj-node-1"]
    assert first.apply_objects == []


def test_pod_group_policy_asks_for_a_gang_of_the_launcher_and_every_node(tmp_path: Path) -> None:
    data = mpi_runtime()
    data["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    (tmp_path / "gang.yaml").write_text(json.dumps(data))
    _, job = prepare_trainjob(Document(trainjob(numNodes=3), ""), tmp_path)
    gang = job.spec.run_policy.scheduling_policy
    assert gang is not None and gang.min_available == 4
