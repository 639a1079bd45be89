"""Compatibility mode: serialise as Flyte's own `pytorch` / `tensorflow` task types (version 1).

A cluster running Flyte's built-in Kubeflow plugins then runs the task with no connector. The
flyteidl messages are per kind, so this module is the one place holding a table of them: a replica
type maps to the message field of the same role. Options Flyte's messages cannot carry (success
policy, scheduling policy, suspend, the ExitCode restart policy) are errors, never dropped silently.
An unset restart policy stays unset: flyteidl's zero value is NEVER, the default of native mode too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flyteidl.plugins import common_pb2 as plugin_common
from flyteidl.plugins.kubeflow import common_pb2, pytorch_pb2, tensorflow_pb2
from flytekit import PodTemplate
from flytekit.core.resources import convert_resources_to_resource_model
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from trainop_core.api.job import TrainingJob as JobModel
from trainop_core.api.types import CleanPodPolicy, RestartPolicy, RunPolicy
from trainop_flyte.config import Replica, TrainingJob
from trainop_flyte.replicas import (
    REPLICA_INDEX_ENV,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_ENV,
    REPLICA_TYPE_LABEL,
)
from trainop_flyte.spec import kind_of

TASK_TYPE_VERSION = 1
PRIMARY_CONTAINER = "primary"


@dataclass(frozen=True)
class FlyteMessage:
    task_type: str
    task: type[Message]
    replica: type[Message]
    fields: dict[str, str]  # canonical replica type -> message field


MESSAGES = {
    "PyTorchJob": FlyteMessage(
        "pytorch",
        pytorch_pb2.DistributedPyTorchTrainingTask,
        pytorch_pb2.DistributedPyTorchTrainingReplicaSpec,
        {"Master": "master_replicas", "Worker": "worker_replicas"},
    ),
    "TFJob": FlyteMessage(
        "tensorflow",
        tensorflow_pb2.DistributedTensorflowTrainingTask,
        tensorflow_pb2.DistributedTensorflowTrainingReplicaSpec,
        {
            "Chief": "chief_replicas",
            "PS": "ps_replicas",
            "Worker": "worker_replicas",
            "Evaluator": "evaluator_replicas",
        },
    ),
}

_CLEAN_POD = {
    CleanPodPolicy.NONE: common_pb2.CLEANPOD_POLICY_NONE,
    CleanPodPolicy.RUNNING: common_pb2.CLEANPOD_POLICY_RUNNING,
    CleanPodPolicy.ALL: common_pb2.CLEANPOD_POLICY_ALL,
}
_RESTART = {
    RestartPolicy.NEVER: plugin_common.RESTART_POLICY_NEVER,
    RestartPolicy.ON_FAILURE: plugin_common.RESTART_POLICY_ON_FAILURE,
    RestartPolicy.ALWAYS: plugin_common.RESTART_POLICY_ALWAYS,
}
_UNSUPPORTED_RUN_POLICY = ("scheduling_policy", "suspend", "managed_by")


class CompatError(ValueError):
    """The config cannot be expressed with Flyte's own Kubeflow task types."""


def message_for(config: TrainingJob) -> FlyteMessage:
    kind = kind_of(config.kind).kind
    if kind not in MESSAGES:
        supported = ", ".join(MESSAGES)
        raise CompatError(f"compat=True: Flyte has task types only for {supported}, not {kind}")
    return MESSAGES[kind]


def task_type(config: TrainingJob) -> str:
    return message_for(config).task_type


def custom(config: TrainingJob, job: JobModel) -> dict[str, Any]:
    """The task template's custom: the flyteidl message as a camelCase dict."""
    message = message_for(config)
    task = message.task()
    kind = kind_of(config.kind)
    for rtype in config.replicas:
        canonical = kind.canonical_replica_type(rtype)
        if canonical not in message.fields:
            raise CompatError(f"compat=True: replica type {rtype!r} has no Flyte field")
        spec = _replica(message.replica, config.replica(rtype), f"replicas.{rtype}")
        getattr(task, message.fields[canonical]).CopyFrom(spec)
    if config.run_policy is not None:
        task.run_policy.CopyFrom(_run_policy(config.run_policy))
    _kind_options(task, config)
    return MessageToDict(task)


def identity_pod_template() -> PodTemplate:
    """A pod template telling each replica who it is, from the labels the Kubeflow operator
    puts on its pods (Flyte's plugins build every replica from the task's pod template)."""
    from kubernetes.client import (
        V1Container,
        V1EnvVar,
        V1EnvVarSource,
        V1ObjectFieldSelector,
        V1PodSpec,
    )

    def from_label(name: str, label: str) -> V1EnvVar:
        selector = V1ObjectFieldSelector(field_path=f"metadata.labels['{label}']")
        return V1EnvVar(name=name, value_from=V1EnvVarSource(field_ref=selector))

    env = [
        from_label(REPLICA_TYPE_ENV, REPLICA_TYPE_LABEL),
        from_label(REPLICA_INDEX_ENV, REPLICA_INDEX_LABEL),
    ]
    primary = V1Container(name=PRIMARY_CONTAINER, env=env)
    return PodTemplate(
        primary_container_name=PRIMARY_CONTAINER, pod_spec=V1PodSpec(containers=[primary])
    )


def _replica(cls: type[Message], replica: Replica, path: str) -> Message:
    spec = cls(replicas=replica.replicas, image=replica.image or "")
    if replica.requests or replica.limits:
        resources = convert_resources_to_resource_model(replica.requests, replica.limits)
        spec.resources.CopyFrom(resources.to_flyte_idl())
    if replica.restart_policy is not None:
        if replica.restart_policy not in _RESTART:
            raise CompatError(f"{path}.restart_policy: {replica.restart_policy.value} unsupported")
        spec.restart_policy = _RESTART[replica.restart_policy]
    return spec


def _run_policy(policy: RunPolicy) -> Message:
    unsupported = [name for name in _UNSUPPORTED_RUN_POLICY if getattr(policy, name) is not None]
    if unsupported:
        raise CompatError(f"run_policy: Flyte's RunPolicy has no {', '.join(unsupported)}")
    out = common_pb2.RunPolicy()
    if policy.clean_pod_policy is not None:
        out.clean_pod_policy = _CLEAN_POD[policy.clean_pod_policy]
    for name in ("ttl_seconds_after_finished", "active_deadline_seconds", "backoff_limit"):
        value = getattr(policy, name)
        if value is not None:
            setattr(out, name, value)
    return out


def _kind_options(task: Message, config: TrainingJob) -> None:
    options = dict(config.kind_options())
    elastic = options.pop("elastic_policy", None)
    nproc = options.pop("nproc_per_node", None)
    if elastic is not None or nproc is not None:
        if "elastic_config" not in task.DESCRIPTOR.fields_by_name:
            raise CompatError(f"compat=True: {config.kind} has no elastic options in Flyte")
        task.elastic_config.CopyFrom(_elastic(_as_dict(elastic), nproc))
    if options:
        raise CompatError(f"compat=True: Flyte cannot express {', '.join(sorted(options))}")


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else dict(value)


def _elastic(policy: dict[str, Any], nproc: str | None) -> Message:
    per_node = policy.get("n_proc_per_node") or (int(nproc) if nproc and nproc.isdigit() else 1)
    return pytorch_pb2.ElasticConfig(
        rdzv_backend=policy.get("rdzv_backend") or "c10d",
        min_replicas=policy.get("min_replicas") or 1,
        max_replicas=policy.get("max_replicas") or 1,
        nproc_per_node=per_node,
        max_restarts=policy.get("max_restarts") or 0,
    )
