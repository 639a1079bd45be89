"""Pipeline-task settings reach every replica's pod template: the fragments KFP's driver fills
into `dsl.TaskConfig` (Kubernetes JSON, as kfp's executor reads them) merged into the job."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_job, make_trainjob
from trainop_kfp.passthrough import PodSettings, apply_pod_settings
from trainop_kfp.runner import prepare_job

from trainop_core.api.load import load_job

# What the driver sends for `.set_cpu_request("1").set_memory_limit("8Gi")
# .set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)`, `.set_env_variable`,
# kfp-kubernetes add_toleration / add_node_selector / add_node_affinity / mount_pvc.
RESOURCES = {"requests": {"cpu": "1"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}
ENV = [{"name": "HF_HOME", "value": "/cache"}, {"name": "LOG_LEVEL", "value": "debug"}]
TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule",
     "tolerationSeconds": 3600.0}
]  # fmt: skip
NODE_SELECTOR = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
AFFINITY = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100.0, "preference": {"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["train"]}]}}
        ]
    }
}  # fmt: skip
VOLUMES = [{"name": "data", "persistentVolumeClaim": {"claimName": "train-data"}}]
VOLUME_MOUNTS = [{"name": "data", "mountPath": "/data"}]
EVERYTHING = PodSettings(RESOURCES, ENV, TOLERATIONS, NODE_SELECTOR, AFFINITY, VOLUMES,
                         VOLUME_MOUNTS)  # fmt: skip


class FakeTaskConfig:
    """Shaped like `kfp.dsl.TaskConfig` (attribute access only)."""

    def __init__(self, **fields: Any) -> None:
        for name in ("affinity", "tolerations", "node_selector", "env", "volumes",
                     "volume_mounts", "resources"):  # fmt: skip
            setattr(self, name, fields.get(name))


def two_replica_job() -> dict[str, Any]:
    builder = make_job("PyTorchJob", "merge").master(command=["python", "t.py"])
    builder.workers(2, command=["python", "t.py"])
    builder.env("Worker", LOG_LEVEL="info", KEEP="1")
    builder.container("Worker", resources={"limits": {"cpu": "4", "memory": "2Gi"}})
    builder.add_container("Worker", name="sidecar", image="busybox")
    builder.set("spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector", {"zone": "a"})
    return builder.build()


def pods(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t: s["template"]["spec"] for t, s in job["spec"]["pytorchReplicaSpecs"].items()}


def merged() -> dict[str, dict[str, Any]]:
    return pods(apply_pod_settings(two_replica_job(), EVERYTHING, "pytorchReplicaSpecs", "pytorch"))


@pytest.mark.parametrize("rtype", ["Master", "Worker"])
def test_every_replica_gets_tolerations_selector_affinity_and_volumes(rtype: str) -> None:
    pod = merged()[rtype]

    assert pod["tolerations"] == TOLERATIONS
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert pod["affinity"] == AFFINITY
    assert pod["volumes"] == VOLUMES
    assert pod["containers"][0]["volumeMounts"] == VOLUME_MOUNTS


def test_the_tasks_resources_win_per_resource_and_the_jobs_others_stay() -> None:
    worker = merged()["Worker"]["containers"][0]

    assert worker["resources"] == {
        "requests": {"cpu": "1"},
        "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
    }


def test_env_merges_by_name_with_the_tasks_value_winning() -> None:
    env = merged()["Worker"]["containers"][0]["env"]

    assert env == [
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "KEEP", "value": "1"},
        {"name": "HF_HOME", "value": "/cache"},
    ]


def test_only_the_default_container_gets_container_settings() -> None:
    sidecar = merged()["Worker"]["containers"][1]

    assert sidecar == {"name": "sidecar", "image": "busybox"}


def test_the_jobs_own_node_selector_keys_are_kept() -> None:
    assert merged()["Worker"]["nodeSelector"]["zone"] == "a"


def test_unset_fields_change_nothing() -> None:
    job = two_replica_job()

    assert apply_pod_settings(job, PodSettings(), "pytorchReplicaSpecs", "pytorch") == job
    assert PodSettings.from_task_config(FakeTaskConfig()).is_empty()
    assert PodSettings.from_task_config(None).is_empty()


def test_merging_twice_adds_nothing_the_second_time() -> None:
    once = apply_pod_settings(two_replica_job(), EVERYTHING, "pytorchReplicaSpecs", "pytorch")

    assert apply_pod_settings(once, EVERYTHING, "pytorchReplicaSpecs", "pytorch") == once


def test_a_task_config_passes_through_prepare_into_a_valid_job_with_ints_again() -> None:
    settings = PodSettings.from_task_config(
        FakeTaskConfig(tolerations=TOLERATIONS, affinity=AFFINITY, env=ENV, resources=RESOURCES)
    )

    job = load_job(prepare_job(two_replica_job(), settings))

    pod = job.spec.replica_specs["Master"].template["spec"]
    assert pod["tolerations"][0]["tolerationSeconds"] == 3600
    preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert type(preferred[0]["weight"]) is int


def trainjob(**trainer: Any) -> dict[str, Any]:
    return make_trainjob(trainer={"numNodes": 2.0, "command": ["python", "t.py"], **trainer})


def test_a_trainjob_gets_the_settings_where_its_author_would_put_them_and_every_node_has_them() -> (
    None
):
    """env and resources in spec.trainer; the pod settings as a runtime patch of the trainer step
    (a TrainJob has no pod template), which every node's pod then carries."""
    from trainop_core.client import prepare_source

    job = trainjob(env=[{"name": "LOG_LEVEL", "value": "info"}, {"name": "KEEP", "value": "1"}])
    prepared = prepare_job(job, EVERYTHING)

    trainer = prepared["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and type(trainer["numNodes"]) is int
    assert {e["name"]: e["value"] for e in trainer["env"]} == {
        "LOG_LEVEL": "debug",  # the task's value wins
        "KEEP": "1",
        "HF_HOME": "/cache",
    }
    assert trainer["resourcesPerNode"] == RESOURCES
    (patch,) = prepared["spec"]["runtimePatches"]
    assert patch["manager"] == "trainop.dev/kfp"
    _, planned, _ = prepare_source(prepared)
    (spec,) = planned.spec.replica_specs.values()
    assert spec.replicas == 2
    pod = spec.template["spec"]
    assert pod["tolerations"][0]["tolerationSeconds"] == 3600
    assert pod["nodeSelector"] == NODE_SELECTOR and pod["volumes"] == VOLUMES
    assert "nodeAffinity" in pod["affinity"]
    (node,) = pod["containers"]
    assert node["volumeMounts"] == VOLUME_MOUNTS and node["resources"] == RESOURCES
    assert {"name": "HF_HOME", "value": "/cache"} in node["env"]


def test_a_trainjob_without_settings_passes_through_unchanged_but_for_ints() -> None:
    prepared = prepare_job(trainjob(), PodSettings())
    assert prepared == trainjob()  # 2 == 2.0: the type is checked next
    assert type(prepared["spec"]["trainer"]["numNodes"]) is int
