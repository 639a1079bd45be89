"""From the task config (and the container Flyte runs) to the core's job: the one translation.

`job_manifest` writes the kubeflow.org/v1 wire dict a user would write by hand; `build_job` hands it
to the core, which loads, defaults and validates it (its errors name wire field paths). What a kind
means (its replica-spec field, default container, replica-type spelling) is asked of the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flytekit import Resources
from pydantic.alias_generators import to_camel

from trainop_core.api.job import API_VERSION
from trainop_core.api.job import TrainingJob as JobModel
from trainop_core.api.types import ApiModel, RestartPolicy
from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.kinds.base import Kind
from trainop_flyte.config import Replica, TrainingJob

# What a replica's restartPolicy is unless the config sets one. Flyte owns retries (`@task(retries=
# ...)`), so a failing replica must fail the task, not be restarted by the operator while the
# task waits; Flyte's own Kubeflow plugins send the same (flyteidl's RestartPolicy zero is NEVER).
FLYTE_RESTART_POLICY = RestartPolicy.NEVER

# flytekit Resources field -> Kubernetes resource name
_RESOURCE_NAMES = {
    "cpu": "cpu",
    "mem": "memory",
    "gpu": "nvidia.com/gpu",
    "ephemeral_storage": "ephemeral-storage",
}


@dataclass(frozen=True)
class Container:
    """What every replica runs, before per-replica overrides: image, argv and env."""

    image: str
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def kind_of(name: str) -> Kind:
    """The core's description of kind `name` (aliases such as MXNetJob accepted)."""
    from trainop_core.api.load import default_registry

    try:
        return default_registry().get(name)
    except KeyError as err:
        raise InvalidJobError([Problem("kind", str(err.args[0]))]) from None


def job_manifest(
    config: TrainingJob,
    container: Container,
    *,
    name: str = "flyte-task",
    namespace: str | None = None,
) -> dict[str, Any]:
    """The wire dict of the job `config` describes, each replica running `container`."""
    kind = kind_of(config.kind)
    spec: dict[str, Any] = {kind.replica_field: _replica_specs(config, kind, container)}
    if config.run_policy is not None:
        spec["runPolicy"] = config.run_policy.to_dict()
    spec.update({to_camel(key): _wire(value) for key, value in config.kind_options().items()})
    metadata = {"name": name}
    if namespace or config.namespace:
        metadata["namespace"] = namespace or config.namespace
    return {"apiVersion": API_VERSION, "kind": config.kind, "metadata": metadata, "spec": spec}


def build_job(
    config: TrainingJob,
    container: Container,
    *,
    name: str = "flyte-task",
    namespace: str | None = None,
) -> JobModel:
    """The core job for `config`, defaulted and validated; raises the core's InvalidJobError."""
    return prepare(job_manifest(config, container, name=name, namespace=namespace))[1]


def _replica_specs(config: TrainingJob, kind: Kind, container: Container) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    for rtype in config.replicas:
        settings = config.replica(rtype)
        spec: dict[str, Any] = {
            "replicas": settings.replicas,
            "template": {"spec": {"containers": [_container(kind, config, settings, container)]}},
        }
        spec["restartPolicy"] = (settings.restart_policy or FLYTE_RESTART_POLICY).value
        specs[kind.canonical_replica_type(rtype)] = spec
    return specs


def _container(
    kind: Kind, config: TrainingJob, settings: Replica, container: Container
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": kind.default_container,
        "image": settings.image or config.image or container.image,
    }
    if container.command:
        out["command"] = list(container.command)
    if container.args:
        out["args"] = list(container.args)
    if container.env:
        out["env"] = [{"name": key, "value": value} for key, value in container.env.items()]
    resources = resource_requirements(settings.requests, settings.limits)
    if resources:
        out["resources"] = resources
    return out


def resource_requirements(
    requests: Resources | None, limits: Resources | None
) -> dict[str, dict[str, str]]:
    """flytekit Resources as a Kubernetes ResourceRequirements dict (empty parts left out)."""
    out = {"requests": _quantities(requests), "limits": _quantities(limits)}
    return {part: values for part, values in out.items() if values}


def _quantities(resources: Resources | None) -> dict[str, str]:
    if resources is None:
        return {}
    values = {
        k8s_name: getattr(resources, attr)
        for attr, k8s_name in _RESOURCE_NAMES.items()
        if getattr(resources, attr) is not None
    }
    return {name: str(value) for name, value in values.items()}


def _wire(value: Any) -> Any:
    if isinstance(value, ApiModel):
        return value.to_dict()
    if isinstance(value, Mapping):
        return dict(value)
    return getattr(value, "value", value)  # enums on the wire are their values
