"""In-process pod decorators: site-specific changes applied to every pod after the kind's own
(and gang's), inside the pure planner.

A decorator is a plain callable that edits a pod manifest in place: add a sidecar, node selectors,
tolerations, env vars. The list is built by `build_pod_decorators` (or from a configuration by
`trainop_core.decorators.config`) and handed to the planner as an argument — there is no global
registry. Third parties may ship one through the `trainop.pod_decorators` entry-point group (each
entry point resolves to a decorator).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points as installed_entry_points
from typing import Any, Protocol

from trainop_core.api.job import TrainingJob

ENTRY_POINT_GROUP = "trainop.pod_decorators"


class PodDecorator(Protocol):
    def __call__(self, job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        """Edit `pod` (a full Pod manifest about to be created) in place.

        Must be pure apart from that edit: no I/O, same input gives the same pod, because the
        planner may run many times for one job and render must show what the operator creates.
        """
        ...


def _pod_spec(pod: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = pod.setdefault("spec", {})
    return spec


class NodeSelector:
    """Merge `labels` into every pod's nodeSelector (the pod's own keys win)."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)

    def __call__(self, job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        spec = _pod_spec(pod)
        spec["nodeSelector"] = {**self.labels, **(spec.get("nodeSelector") or {})}


class Tolerations:
    """Append tolerations the pod does not already have."""

    def __init__(self, tolerations: Sequence[Mapping[str, Any]]) -> None:
        self.tolerations = [dict(t) for t in tolerations]

    def __call__(self, job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        existing = _pod_spec(pod).setdefault("tolerations", [])
        existing += [copy.deepcopy(t) for t in self.tolerations if t not in existing]


class Sidecar:
    """Add `container` to the pods of `replica_types` (all types when empty), once."""

    def __init__(self, container: Mapping[str, Any], replica_types: Sequence[str] = ()) -> None:
        self.container = dict(container)
        self.replica_types = tuple(replica_types)

    def __call__(self, job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        if self.replica_types and rtype not in self.replica_types:
            return
        containers = _pod_spec(pod).setdefault("containers", [])
        if all(c.get("name") != self.container.get("name") for c in containers):
            containers.append(copy.deepcopy(self.container))


class Env:
    """Add env vars to every container (init containers too) that does not set them already:
    a job's own value, and the env contract that wires its replicas together, always win."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = {str(k): str(v) for k, v in env.items()}

    def __call__(self, job: TrainingJob, rtype: str, index: int, pod: dict[str, Any]) -> None:
        spec = _pod_spec(pod)
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                entries = container.setdefault("env", [])
                present = {e.get("name") for e in entries}
                entries += [{"name": k, "value": v} for k, v in self.env.items()
                            if k not in present]  # fmt: skip


def plugin_decorators() -> list[PodDecorator]:
    """Every decorator installed through the `trainop.pod_decorators` entry-point group."""
    found: list[PodDecorator] = []
    for point in installed_entry_points(group=ENTRY_POINT_GROUP):
        loaded = point.load()
        if not callable(loaded):
            raise TypeError(f"entry point {point.name!r} in {ENTRY_POINT_GROUP} is not callable")
        found.append(loaded)
    return found


def build_pod_decorators(
    *, entry_points: bool = True, extra: Sequence[PodDecorator] = ()
) -> tuple[PodDecorator, ...]:
    """A fresh, ordered tuple: installed plugins first, then `extra`, applied in that order."""
    plugins = plugin_decorators() if entry_points else []
    return (*plugins, *extra)
