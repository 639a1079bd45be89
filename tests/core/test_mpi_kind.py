"""MPIJob, the seventh kind: kinds/mpi.py, one table line, and the launcher pattern's generic hooks
(objects planned besides pods, a replica type that starts once another runs, no Services)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import JobBuilder, make_job
from tests.core._kind_builders import REGISTRY, T0, defaulted
from trainop_core.api.load import load_job
from trainop_core.api.types import RestartPolicy
from trainop_core.api.validation import validate_job
from trainop_core.kinds.base import CONFIGMAP_DIR_OPTION, EXEC_AGENT_OPTION
from trainop_core.kinds.base import ReplicaCounts as RC
from trainop_core.kinds.mpi import mpi_status
from trainop_core.planner import (
    KubernetesAddressing,
    Observed,
    ObservedPod,
    Plan,
    PlanOptions,
    plan,
)

KIND = REGISTRY.get("MPIJob")


def mpi(workers: int = 2) -> JobBuilder:
    b = make_job("MPIJob", "pi").replica("Launcher", 1).command(["mpirun", "hostname"], "Launcher")
    return b.workers(workers) if workers else b


def planned(b: JobBuilder, pods: tuple[ObservedPod, ...] = (), **options: Any) -> Plan:
    job = load_job(b.build(), registry=REGISTRY)
    opts = PlanOptions(kind_options=options)
    return plan(job, KIND, Observed(pods=pods), T0, KubernetesAddressing(job, KIND), opts)


def running_workers(n: int) -> tuple[ObservedPod, ...]:
    return tuple(ObservedPod(f"pi-worker-{i}", "Worker", i, "Running") for i in range(n))


PROCESS = {EXEC_AGENT_OPTION: "/x/rsh", CONFIGMAP_DIR_OPTION: "/state/cm"}


def test_on_kubernetes_the_launcher_comes_with_the_workers_and_its_init_container_waits() -> None:
    first = planned(mpi())
    names = sorted(p["metadata"]["name"] for p in first.create_pods)
    assert names == ["pi-launcher", "pi-worker-0", "pi-worker-1"]  # as upstream: gangs need it
    assert not first.create_services  # MPI reaches its workers by exec, not through Services
    launcher = next(p for p in first.create_pods if p["metadata"]["name"] == "pi-launcher")
    assert launcher["spec"]["initContainers"][0]["name"] == "kubectl-delivery"


def test_on_a_process_backend_the_launcher_starts_once_every_worker_runs() -> None:
    first = planned(mpi(), **PROCESS)
    assert [p["metadata"]["name"] for p in first.create_pods] == ["pi-worker-0", "pi-worker-1"]
    pending = ObservedPod("pi-worker-1", "Worker", 1, "Pending")
    assert planned(mpi(), (*running_workers(1), pending), **PROCESS).create_pods == []
    both_up = planned(mpi(), running_workers(2), **PROCESS)
    assert [p["metadata"]["name"] for p in both_up.create_pods] == ["pi-launcher"]


def test_the_configmap_follows_the_running_workers_for_horovod_elastic() -> None:
    objects = {o["kind"]: o for o in planned(mpi(3), running_workers(2)).apply_objects}
    data = objects["ConfigMap"]["data"]
    assert data["hostfile"] == "pi-worker-0 slots=1\npi-worker-1 slots=1\npi-worker-2 slots=1\n"
    assert data["discover_hosts.sh"] == "#!/bin/sh\necho pi-worker-0:1\necho pi-worker-1:1"
    assert objects["Role"]["rules"][1]["resourceNames"] == [f"pi-worker-{i}" for i in range(3)]
    assert all(o["metadata"]["ownerReferences"][0]["kind"] == "MPIJob" for o in objects.values())


def test_a_gpu_launcher_joins_the_hostfile_and_keeps_its_nvidia_env() -> None:
    b = mpi(1).container("Launcher", resources={"limits": {"nvidia.com/gpu": 1}})
    objects = {o["kind"]: o for o in planned(b).apply_objects}
    assert objects["ConfigMap"]["data"]["hostfile"] == "pi-launcher slots=1\npi-worker-0 slots=1\n"
    launcher = next(p for p in planned(b).create_pods if "launcher" in p["metadata"]["name"])
    names = [e["name"] for e in launcher["spec"]["containers"][0]["env"]]
    assert "NVIDIA_VISIBLE_DEVICES" not in names


def test_user_set_intel_mpi_bootstrap_is_kept_and_main_container_reaches_kubexec() -> None:
    b = mpi(1).env("Launcher", I_MPI_HYDRA_BOOTSTRAP="ssh").spec(mainContainer="mpi")
    launcher = next(p for p in planned(b).create_pods if "launcher" in p["metadata"]["name"])
    env = {e["name"]: e["value"] for e in launcher["spec"]["containers"][0]["env"]}
    assert (env["I_MPI_HYDRA_BOOTSTRAP"], env["I_MPI_HYDRA_BOOTSTRAP_EXEC"]) == (
        "ssh",
        "/etc/mpi/kubexec.sh",
    )
    kubexec = planned(b).apply_objects[1]["data"]["kubexec.sh"]
    assert kubexec.endswith('kubectl exec ${POD_NAME} --container mpi -- /bin/sh -c "$*"')


def test_a_process_backend_gets_its_own_agent_and_hostfile_and_no_kubectl() -> None:
    launcher = planned(mpi(1), running_workers(1), **PROCESS).create_pods[0]
    env = {e["name"]: e["value"] for e in launcher["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == env["PRTE_MCA_plm_ssh_agent"] == "/x/rsh"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/state/cm/pi-config/hostfile"
    assert env["HYDRA_HOST_FILE"] == env["PRTE_MCA_prte_default_hostfile"]
    assert "initContainers" not in launcher["spec"] and "volumes" not in launcher["spec"]
    worker = planned(mpi(1), **PROCESS).create_pods[0]
    assert worker["spec"]["containers"][0]["command"] == ["sleep"]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ({"Launcher": RC(1, active=1), "Worker": RC(2, active=2)}, ["Running"]),
        ({"Launcher": RC(1, succeeded=1), "Worker": RC(2, failed=2)}, ["Succeeded"]),
        ({"Launcher": RC(1, active=1), "Worker": RC(2, active=1, failed=1)}, ["Running", "Failed"]),
        ({"Launcher": RC(1, failed=1), "Worker": RC(2, active=2)}, ["Failed"]),
        (
            {"Launcher": RC(1), "Worker": RC(2, failed=1, restart_policy=RestartPolicy.EXIT_CODE)},
            ["Restarting"],
        ),
    ],
    ids=[
        "the launcher running makes the job Running",
        "the launcher decides success whatever the workers did",
        "a failed worker fails a running job, after Running",
        "a failed launcher fails the job",
        "an ExitCode worker failure restarts",
    ],
)
def test_the_launcher_decides(counts: dict[str, RC], expected: list[str]) -> None:
    job = defaulted(mpi().job())
    assert [v.state for v in mpi_status(job, counts, False)] == expected


def test_defaults_and_validation_follow_upstream() -> None:
    job = defaulted(
        make_job("MPIJob")
        .replica("Launcher", None)
        .replica("Worker", None)
        .spec(cleanPodPolicy="Running")
        .job()
    )
    assert (
        job.spec.replica_specs["Launcher"].replicas,
        job.spec.replica_specs["Worker"].replicas,
    ) == (1, 0)
    assert job.spec.run_policy.clean_pod_policy.value == "Running"  # type: ignore[union-attr]  # defaulted
    assert "ports" not in job.spec.replica_specs["Worker"].template["spec"]["containers"][0]
    bad = (
        make_job("MPIJob")
        .replica("Launcher", 2)
        .workers(1)
        .spec(slotsPerWorker=0, mainContainer="x")
    )
    bad.container("Worker", name="anything")  # any container name will do, as upstream
    problems = {p.path: p.message for p in validate_job(defaulted(bad.job()), KIND)}
    assert problems == {
        "spec.mpiReplicaSpecs.Launcher.replicas": "must be 1",
        "spec.slotsPerWorker": "must be at least 1",
        "spec.mainContainer": "no container 'x' in spec.mpiReplicaSpecs.Worker to exec into",
    }
    missing = {p.path for p in validate_job(defaulted(make_job("MPIJob").workers(1).job()), KIND)}
    assert "spec.mpiReplicaSpecs.Launcher" in missing
