"""What Flyte stores for each task type, in both modes, kept stable by golden files.

Regenerate with TRAINOP_UPDATE_GOLDEN=1 after an intended change, and review the diff.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import flyte_tasks
import pytest
from flyteidl.plugins import common_pb2 as plugin_common
from flyteidl.plugins.kubeflow import pytorch_pb2, tensorflow_pb2
from flytekit.configuration import ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable
from google.protobuf.json_format import MessageToDict, ParseDict
from trainop_flyte import PyTorch, Replica, RestartPolicy, TrainingJobCommandTask
from trainop_flyte.spec import Container, job_manifest

GOLDEN = Path(__file__).parent / "golden"
SETTINGS = SerializationSettings(
    image_config=ImageConfig.from_images("ghcr.io/trainop/flyte-tasks:test")
)
MXNET_YAML = Path(__file__).resolve().parents[2] / "examples" / "mxnet" / "ps.yaml"


def template_of(task: Any) -> dict[str, Any]:
    template = get_serializable(OrderedDict(), SETTINGS, task).template
    data = MessageToDict(template.to_flyte_idl())
    data["metadata"].pop("runtime", None)  # flytekit's own version: not ours to pin
    return data


def command_task() -> TrainingJobCommandTask:
    return TrainingJobCommandTask(
        name="mxnet_ps",
        job=MXNET_YAML,
        inputs={"epochs": int},
        outputs={"state": str, "accuracy": float},
        metrics_replica="any",
    )


CASES = {
    "pytorch_native": lambda: flyte_tasks.rank_sum,
    "tensorflow_native": lambda: flyte_tasks.tf_config,
    "xgboost_native": lambda: flyte_tasks.xgb_train,
    "mxnet_native": lambda: flyte_tasks.mxnet_function,
    "pytorch_compat": lambda: flyte_tasks.rank_sum_compat,
    "tensorflow_compat": lambda: flyte_tasks.tf_compat,
    "mxnet_command": command_task,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_task_template_matches_its_golden_file(case: str) -> None:
    if case == "mxnet_command" and not MXNET_YAML.exists():
        pytest.skip("examples/mxnet/ps.yaml is not there")
    actual = json.dumps(template_of(CASES[case]()), indent=2, sort_keys=True) + "\n"
    path = GOLDEN / f"{case}.json"
    if os.environ.get("TRAINOP_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    assert path.exists(), f"{path.name} missing: run with TRAINOP_UPDATE_GOLDEN=1"
    assert actual == path.read_text()


def test_native_mode_is_the_connectors_task_type_with_the_job_manifest() -> None:
    data = template_of(flyte_tasks.rank_sum)

    assert (data["type"], data.get("taskTypeVersion", 0)) == ("trainop_training_job", 0)
    replicas = data["custom"]["job"]["spec"]["pytorchReplicaSpecs"]
    assert {rtype: spec["replicas"] for rtype, spec in replicas.items()} == {
        "Master": 1,
        "Worker": 2,
    }
    assert data["container"]["args"][0] == "pyflyte-execute"


def test_replicas_default_to_never_restart_in_native_and_compat_mode() -> None:
    native = template_of(flyte_tasks.rank_sum)["custom"]["job"]["spec"]["pytorchReplicaSpecs"]
    compat = ParseDict(
        template_of(flyte_tasks.rank_sum_compat)["custom"],
        pytorch_pb2.DistributedPyTorchTrainingTask(),
    )

    assert {spec["restartPolicy"] for spec in native.values()} == {"Never"}
    # Flyte's backend reads an unset restart policy as its enum's zero value, NEVER
    never = plugin_common.RESTART_POLICY_NEVER
    assert compat.master_replicas.restart_policy == compat.worker_replicas.restart_policy == never


def test_a_restart_policy_the_config_sets_is_kept() -> None:
    spec = template_of(flyte_tasks.worker_fails)["custom"]["job"]["spec"]["pytorchReplicaSpecs"]
    assert spec["Worker"]["restartPolicy"] == "Never" and spec["Master"]["restartPolicy"] == "Never"
    config = PyTorch(workers=1, worker=Replica(restart_policy=RestartPolicy.ON_FAILURE))
    manifest = job_manifest(config, Container(image="img"))
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    assert manifest["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "Never"


def test_compat_pytorch_is_flytes_own_v1_message() -> None:
    data = template_of(flyte_tasks.rank_sum_compat)

    assert (data["type"], data["taskTypeVersion"]) == ("pytorch", 1)
    # the serialisation flytekitplugins-kfpytorch gives the same settings
    assert data["custom"] == {
        "workerReplicas": {
            "replicas": 2,
            "resources": {"requests": [{"name": "CPU", "value": "1"}]},
        },
        "masterReplicas": {"replicas": 1},
        "runPolicy": {"cleanPodPolicy": "CLEANPOD_POLICY_ALL", "backoffLimit": 3},
    }
    message = ParseDict(data["custom"], pytorch_pb2.DistributedPyTorchTrainingTask())
    assert message.worker_replicas.replicas == 2


def test_compat_tensorflow_names_chief_ps_and_workers() -> None:
    data = template_of(flyte_tasks.tf_compat)

    assert (data["type"], data["taskTypeVersion"]) == ("tensorflow", 1)
    message = ParseDict(data["custom"], tensorflow_pb2.DistributedTensorflowTrainingTask())
    replicas = (message.chief_replicas, message.ps_replicas, message.worker_replicas)
    assert [spec.replicas for spec in replicas] == [1, 1, 2]


def test_compat_pods_learn_their_replica_from_the_operators_labels() -> None:
    data = template_of(flyte_tasks.rank_sum_compat)

    (primary,) = data["k8sPod"]["podSpec"]["containers"]
    paths = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in primary["env"]}
    assert paths == {
        "TRAINOP_REPLICA_TYPE": "metadata.labels['training.kubeflow.org/replica-type']",
        "TRAINOP_REPLICA_INDEX": "metadata.labels['training.kubeflow.org/replica-index']",
    }
