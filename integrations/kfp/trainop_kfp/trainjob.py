"""Pipeline-task settings on a Kubeflow Trainer v2 TrainJob, where its author would put them.

A TrainJob has no pod template of its own (its runtime has): env and resources go to
`spec.trainer` (`env`, merged by name; `resourcesPerNode`), and the pod-level settings
(tolerations, nodeSelector, affinity, volumes, the node container's volumeMounts) to one
`runtimePatches` entry of manager `trainop.dev/kfp` for the trainer step (`node`, as Trainer's
runtimes name it), the way Kueue writes its own. The merge rule is `passthrough`'s: the pipeline
task's setting wins for the same key.
"""

from __future__ import annotations

import copy
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_kfp.coerce import coerce_ints, coerce_k8s
from trainop_kfp.passthrough import Json, PodSettings, merge_env, merge_resources

KFP_MANAGER = "trainop.dev/kfp"


def prepare_trainjob(data: Json, settings: PodSettings | None) -> Json:
    """The TrainJob with `settings` merged in and integral floats back to ints. Pure; parts
    that are not mappings are left for validation to report."""
    result: Json = copy.deepcopy(data)
    spec = result.get("spec")
    if settings is not None and not settings.is_empty() and isinstance(spec, dict):
        trainer = spec.setdefault("trainer", {})
        if isinstance(trainer, dict):
            _merge_trainer(trainer, settings)
        pod = _pod_spec(settings)
        if pod and isinstance(spec.get("runtimePatches") or [], list):
            spec["runtimePatches"] = [
                *(spec.get("runtimePatches") or []),
                v2.pod_patch(KFP_MANAGER, {"spec": pod}),
            ]
    coerced: Json = coerce_ints(result, v2.TrainJob)
    return coerced


def _merge_trainer(trainer: Json, settings: PodSettings) -> None:
    if settings.env is not None:
        trainer["env"] = merge_env(trainer.get("env"), settings.env)
    if settings.resources is not None:
        current = trainer.get("resourcesPerNode")
        trainer["resourcesPerNode"] = merge_resources(current, settings.resources)


def _pod_spec(settings: PodSettings) -> Json:
    fields: dict[str, Any] = {
        "tolerations": settings.tolerations,
        "nodeSelector": settings.node_selector,
        "affinity": settings.affinity,
        "volumes": settings.volumes,
    }
    pod = {name: copy.deepcopy(value) for name, value in fields.items() if value is not None}
    if settings.volume_mounts is not None:
        mounts = copy.deepcopy(settings.volume_mounts)
        pod["containers"] = [{"name": v2.NODE, "volumeMounts": mounts}]
    coerced: Json = coerce_k8s(pod, "V1PodSpec")  # a patch is plain data to the TrainJob model
    return coerced
