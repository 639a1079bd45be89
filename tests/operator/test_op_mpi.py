"""MPIJob through the real operator and kube-apiserver: the objects, pods and status upstream's
controller makes, compared field by field.

What these tests cannot prove: the kubelet stand-in runs no container, so no kubectl-delivery
copies kubectl or waits for the workers, no `kubectl exec` reaches a worker (the stand-in cannot
exec) and no `mpirun` starts a rank here; whether upstream's kubexec.sh and kubectl-delivery
image work is theirs to prove. These tests prove what the operator writes (the ConfigMap's
scripts, the launcher's RBAC, env, mounts and init container), that the server accepts it (the
Role is created by the operator's own identity only if it may grant pods/exec:
tests/deploy/test_rbac.py) and how the job's state follows the launcher. That mpirun really
starts the ranks through an rsh agent, each in its worker's environment, is shown on the local
and Ray backends (examples/mpi in tests/test_examples.py and tests/ray/test_ray_examples.py,
the agent in tests/local/test_local_podexec.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_job
from k8s import namespace_name
from opkit import Cluster, RunningOperator, open_cluster, wait_for

from trainop_core.kinds.table import build_registry
from trainop_core.testing.controlplane import ControlPlane

NAME = "pi"
LAUNCHER = ["mpirun", "-np", "4", "python", "/opt/pi.py"]


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("mpi")
    registry = build_registry(entry_points=False)
    with open_cluster(control_plane, namespace_name("mpi"), registry, tmp) as cluster:
        op = RunningOperator(cluster).wait_started()
        yield cluster
        op.stop()


def mpi_job(name: str = NAME, workers: int = 2) -> dict[str, Any]:
    b = make_job("MPIJob", name).spec(slotsPerWorker=2).replica("Launcher", 1).workers(workers)
    b.container("Launcher", name="launcher", command=LAUNCHER)
    return b.container("Worker", name="worker").build()


def owned(job: dict[str, Any]) -> list[dict[str, Any]]:
    meta = job["metadata"]
    return [{"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "name": meta["name"],
             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip


def read(env: Cluster, path: str) -> dict[str, Any] | None:
    found = [o for o in env.rest.get(path)["items"] if o["metadata"]["name"].startswith(NAME)]
    return found[0] if found else None


def test_an_mpijob_gets_upstream_s_objects_and_pods_and_succeeds_with_its_launcher(
    env: Cluster,
) -> None:
    ns = env.namespace
    job = env.create_job(mpi_job())
    # No rule yet: every pod stays Pending. As upstream, the launcher is created with the
    # workers (gang scheduling needs all of them); its kubectl-delivery init container is what
    # waits until the hostfile's workers run.
    pods = wait_for(lambda: len(p := env.pods(NAME)) == 3 and p, what="the launcher and workers")
    assert [p.metadata.name for p in pods] == ["pi-launcher", "pi-worker-0", "pi-worker-1"]
    launcher, workers = pods[0], pods[1:]
    path = f"/api/v1/namespaces/{ns}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    role = wait_for(lambda: read(env, f"{rbac}/roles"), what="the launcher's Role")
    config = read(env, f"{path}/configmaps")
    account = read(env, f"{path}/serviceaccounts")
    binding = read(env, f"{rbac}/rolebindings")
    assert config is not None and account is not None and binding is not None
    for obj, name in ((config, "pi-config"), (account, "pi-launcher"), (role, "pi-launcher"),
                      (binding, "pi-launcher")):  # fmt: skip
        assert obj["metadata"]["name"] == name
        assert obj["metadata"]["labels"] == {"app": NAME}
        assert obj["metadata"]["ownerReferences"] == owned(job)
    assert config["data"] == {
        "hostfile": "pi-worker-0 slots=2\npi-worker-1 slots=2\n",
        "kubexec.sh": "#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n/opt/kube/kubectl exec ${POD_NAME} "
        '-- /bin/sh -c "$*"',
        "discover_hosts.sh": "#!/bin/sh",
    }
    assert role["rules"] == [
        {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]},
        {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"],
         "resourceNames": ["pi-worker-0", "pi-worker-1"]},
    ]  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pi-launcher",
                                    "namespace": ns}]  # fmt: skip
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "pi-launcher"}  # fmt: skip
    assert not env.services(NAME)
    for worker in workers:
        (main,) = worker.spec.containers
        assert (main.command, main.args) == (["sleep"], ["365d"])
        assert [(m.name, m.mount_path) for m in main.volume_mounts if m.name.startswith("mpi")] == [
            ("mpi-job-config", "/etc/mpi")
        ]
    labels = launcher.metadata.labels
    assert labels["training.kubeflow.org/replica-type"] == "launcher"
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert launcher.spec.service_account_name == "pi-launcher"
    (main,) = launcher.spec.containers
    assert main.command == LAUNCHER
    assert [(e.name, e.value) for e in main.env] == [
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("NVIDIA_VISIBLE_DEVICES", None),  # the server drops the empty value, as for upstream's
        ("NVIDIA_DRIVER_CAPABILITIES", None),
        ("I_MPI_HYDRA_BOOTSTRAP", "rsh"),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh"),
    ]
    assert [(m.name, m.mount_path) for m in main.volume_mounts if m.name.startswith("mpi")] == [
        ("mpi-job-kubectl", "/opt/kube"),
        ("mpi-job-config", "/etc/mpi"),
    ]
    (init,) = launcher.spec.init_containers
    assert (init.name, init.image) == ("kubectl-delivery", "kubeflow/kubectl-delivery:latest")
    assert {e.name: e.value for e in init.env} == {"TARGET_DIR": "/opt/kube", "NAMESPACE": ns}
    assert init.resources.limits == {"cpu": "100m", "ephemeral-storage": "5Gi", "memory": "512Mi"}
    volumes = {v.name: v for v in launcher.spec.volumes if v.name.startswith("mpi")}
    assert volumes["mpi-job-kubectl"].empty_dir is not None
    items = volumes["mpi-job-config"].config_map.items
    assert volumes["mpi-job-config"].config_map.name == "pi-config"
    assert [(i.key, i.mode) for i in items] == [
        ("kubexec.sh", 0o555),
        ("hostfile", 0o444),
        ("discover_hosts.sh", 0o555),
    ]

    # The stand-in kubelet runs no init container: it plays the workers running, then the
    # launcher's mpirun ending well.
    for pod in ("pi-worker-0", "pi-worker-1", "pi-launcher"):
        env.kubelet.run(ns, pod)
    env.wait_condition("MPIJob", NAME, "Running")
    env.terminate("pi-launcher", exit_code=0)
    conditions = env.wait_condition("MPIJob", NAME, "Succeeded")
    assert conditions.get("Failed") != "True"
    status = env.get_job("MPIJob", NAME)["status"]
    assert status["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    # Horovod elastic's host list followed the workers once they ran.
    config = read(env, f"{path}/configmaps")
    assert config is not None
    assert (
        config["data"]["discover_hosts.sh"] == "#!/bin/sh\necho pi-worker-0:2\necho pi-worker-1:2"
    )


def test_a_configmap_of_that_name_not_owned_by_the_job_stops_it_with_an_event(
    env: Cluster,
) -> None:
    name = "taken"
    env.rest.create(
        f"/api/v1/namespaces/{env.namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
         "data": {"mine": "yes"}},
    )  # fmt: skip
    env.create_job(mpi_job(name, workers=1))
    event = wait_for(
        lambda: next((e for e in env.events(name) if e.reason == "ErrResourceExists"), None),
        what="the ErrResourceExists event",
    )
    assert f'"{name}-config" of kind "ConfigMap" already exists' in event.message
    assert env.pods(name) == []  # nothing is created next to someone else's ConfigMap
