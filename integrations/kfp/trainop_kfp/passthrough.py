"""Pipeline-task settings (KFP's TaskConfig passthroughs) merged into every replica's pod template.

KFP fills `dsl.TaskConfig` with Kubernetes JSON fragments taken from the task's `.set_cpu_limit`,
`.set_env_variable` and kfp-kubernetes calls: `resources` is a ResourceRequirements
(`{"limits": {...}, "requests": {...}}`), `env` a list of EnvVar, `tolerations` a list of
Toleration, `node_selector` a string map, `affinity` an Affinity, `volumes`/`volume_mounts` lists
of Volume/VolumeMount. A field is None when the task did not set it (always, under kfp.local).

Merge rule: the pipeline task's setting is the later, deliberate one, so it wins over the job
file's for the same key (resource name, env var name, node-selector key, affinity kind, volume
name, mount path); everything else in the job file is kept. Container-level settings go to the
kind's default container (e.g. `pytorch`), or the first container when none has that name.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class PodSettings:
    """The passthrough fragments, in Kubernetes JSON form; None means "not set"."""

    resources: Json | None = None
    env: list[Json] | None = None
    tolerations: list[Json] | None = None
    node_selector: dict[str, str] | None = None
    affinity: Json | None = None
    volumes: list[Json] | None = None
    volume_mounts: list[Json] | None = None

    @classmethod
    def from_task_config(cls, task_config: Any) -> PodSettings:
        """From a `kfp.dsl.TaskConfig` (read by attribute, so kfp need not be imported)."""
        if task_config is None:
            return cls()
        return cls(**{f.name: getattr(task_config, f.name, None) for f in fields(cls)})

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


def apply_pod_settings(
    job: Mapping[str, Any], settings: PodSettings, replica_field: str, default_container: str
) -> Json:
    """A copy of `job` (wire form) with `settings` merged into every replica's pod template.
    Pure. Replica specs that are not mappings are left for validation to report."""
    result: Json = copy.deepcopy(dict(job))
    if settings.is_empty():
        return result
    specs = (result.get("spec") or {}).get(replica_field)
    if not isinstance(specs, dict):
        return result
    for replica in specs.values():
        if isinstance(replica, dict):
            template = replica.setdefault("template", {})
            if isinstance(template, dict):
                merge_into_template(template, settings, default_container)
    return result


def merge_into_template(template: Json, settings: PodSettings, default_container: str) -> None:
    """Merge `settings` into one PodTemplateSpec, in place."""
    pod = template.setdefault("spec", {})
    if settings.tolerations is not None:
        pod["tolerations"] = _union_list(pod.get("tolerations"), settings.tolerations)
    if settings.node_selector is not None:
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **settings.node_selector}
    if settings.affinity is not None:
        pod["affinity"] = {**(pod.get("affinity") or {}), **settings.affinity}
    if settings.volumes is not None:
        pod["volumes"] = _merge_by(pod.get("volumes"), settings.volumes, _key("name"))
    container = _target_container(pod, default_container)
    if container is not None:
        _merge_container(container, settings)


def _merge_container(container: Json, settings: PodSettings) -> None:
    if settings.resources is not None:
        container["resources"] = merge_resources(container.get("resources"), settings.resources)
    if settings.env is not None:
        container["env"] = merge_env(container.get("env"), settings.env)
    if settings.volume_mounts is not None:
        mounts = _merge_by(container.get("volumeMounts"), settings.volume_mounts, _key("mountPath"))
        container["volumeMounts"] = mounts


def _target_container(pod: Json, default_container: str) -> Json | None:
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    named = [c for c in containers if c.get("name") == default_container]
    candidates = named or containers
    return candidates[0] if candidates else None


def merge_env(current: Any, extra: list[Json]) -> list[Json]:
    """EnvVars of `current` with those of `extra` replacing the same names, new ones appended."""
    return _merge_by(current, extra, _key("name"))


def merge_resources(current: Any, extra: Mapping[str, Any]) -> Json:
    """ResourceRequirements `current` with `extra`'s quantities winning, section by section."""
    merged: Json = dict(current or {})
    for section, values in extra.items():
        if isinstance(values, Mapping) and isinstance(merged.get(section), Mapping):
            merged[section] = {**merged[section], **values}
        else:
            merged[section] = copy.deepcopy(values)
    return merged


def _key(name: str) -> Callable[[Json], Any]:
    return lambda item: item.get(name) if isinstance(item, Mapping) else None


def _merge_by(current: Any, extra: list[Json], key: Callable[[Json], Any]) -> list[Json]:
    """`current` with items of `extra` replacing those with the same key, new ones appended."""
    incoming = {key(item): item for item in extra if key(item) is not None}
    merged = [incoming.pop(key(item), item) for item in current or []]
    return merged + [copy.deepcopy(item) for item in extra if key(item) in incoming]


def _union_list(current: Any, extra: list[Json]) -> list[Json]:
    merged = list(current or [])
    return merged + [copy.deepcopy(item) for item in extra if item not in merged]
