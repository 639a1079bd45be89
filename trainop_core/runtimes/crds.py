"""The CRDs of trainer.kubeflow.org/v1alpha1, generated from the models as the v1 kinds' are.

Committed under operator/trainer/crds (tests/deploy/test_trainer_manifests.py keeps them equal)
and printed by `trainop crds`. The models carry Trainer's markers (defaults, enums, bounds, list
types, CEL rules); the Kubernetes-typed parts the models keep as plain data (env, resources, the
runtime's batch/v1 JobSpec and PVC templates, a patch's pod-spec subset) are typed here by
runtimes/k8s_schema.py, with k8s.io/api's markers inside and Trainer's own around them.
Embedded metadata is controller-gen's: labels, annotations, finalizers, name, namespace. Every
fact, inside the Kubernetes types too, is compared with Trainer v2.3's CRDs by
tests/core/test_trainer_crd_facts.py.
"""

from __future__ import annotations

import copy
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.trainjob_validation import PATCH_CONTAINER_FIELDS, PATCH_POD_FIELDS
from trainop_core.crds import structural
from trainop_core.runtimes.k8s_schema import EMBEDDED_METADATA, kube_schema

_STATE = {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def trainer_crds() -> list[dict[str, Any]]:
    """TrainJob, TrainingRuntime and ClusterTrainingRuntime, in that order."""
    return [
        _crd(v2.TrainJob, "trainjobs", "Namespaced", status=True),
        _crd(v2.TrainingRuntime, "trainingruntimes", "Namespaced"),
        _crd(v2.ClusterTrainingRuntime, "clustertrainingruntimes", "Cluster"),
    ]


def _crd(
    model: type[v2.TrainJob] | type[v2.TrainingRuntime],
    plural: str,
    scope: str,
    status: bool = False,
) -> dict[str, Any]:
    kind = model.model_fields["kind"].default
    version: dict[str, Any] = {"name": v2.VERSION, "served": True, "storage": True}
    if status:  # Trainer's runtimes have no printer columns and no status
        version["additionalPrinterColumns"] = [_STATE, _AGE]
    version["schema"] = {"openAPIV3Schema": _schema(model)}
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{v2.GROUP}"},
        "spec": {
            "group": v2.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": scope,
            "versions": [version],
        },
    }


def _schema(model: type[v2.TrainJob] | type[v2.TrainingRuntime]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    schema = structural(raw, raw.get("$defs", {}), defaults=True)
    schema["properties"]["metadata"] = {"type": "object"}  # the API server owns ObjectMeta
    schema["properties"]["kind"] = {"type": "string"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema.pop("required", None)
    parts = _TRAINJOB_PARTS if model is v2.TrainJob else _RUNTIME_PARTS
    for path, part in parts.items():
        _replace(schema, path, part())
    return schema


def _replace(schema: dict[str, Any], path: str, part: dict[str, Any]) -> None:
    """Put `part` at `path` (dotted, `[]` for a list's items), keeping the markers already
    there (a list's bounds, a field's CEL rules) over it."""
    *parents, last = path.replace("[]", ".[]").split(".")
    node = schema
    for step in parents:
        node = node["items"] if step == "[]" else node["properties"][step]
    key, holder = ("items", node) if last == "[]" else (last, node["properties"])
    kept = {
        k: v
        for k, v in holder[key].items()
        if k not in ("type", "properties", "items", "additionalProperties")
        and k != "x-kubernetes-preserve-unknown-fields"
    }
    holder[key] = part | kept


def _env() -> dict[str, Any]:
    return kube_schema("core.v1.EnvVar")


def _resources() -> dict[str, Any]:
    return kube_schema("core.v1.ResourceRequirements")


def _object_reference() -> dict[str, Any]:
    return kube_schema("core.v1.LocalObjectReference")


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        node["required"] = list(required)
    return node


def _job_template() -> dict[str, Any]:
    """batch/v1 JobTemplateSpec, typed whole: the API server prunes and defaults a runtime's
    JobSpec as Trainer's CRD has it."""
    return kube_schema("batch.v1.JobTemplateSpec")


def _claim_template() -> dict[str, Any]:
    return kube_schema("core.v1.PersistentVolumeClaim")


# --- a runtime patch: Trainer's TrainingRuntimeSpecPatch and the pod-spec subset it may set ------

_IMMUTABLE = v2.cel(v2.IMMUTABLE)
_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
# Trainer's markers on each field a patch may set (PodSpecPatch, ContainerPatch).
_POD_MARKS: dict[str, dict[str, Any]] = {
    "containers": {"maxItems": 64, **v2.list_map("name"), **_IMMUTABLE},
    "initContainers": {"maxItems": 64, **v2.list_map("name"), **_IMMUTABLE},
    "imagePullSecrets": {"maxItems": 64, **v2.list_map("name"), **_IMMUTABLE},
    "schedulingGates": {"maxItems": 16, **v2.list_map("name")},
    "securityContext": _IMMUTABLE,
    "serviceAccountName": {"maxLength": 253, **_IMMUTABLE},
    "terminationGracePeriodSeconds": {**v2.INT64, "minimum": 0, **_IMMUTABLE},
    "tolerations": {"maxItems": 128, **v2.ATOMIC},
    "volumes": {"maxItems": 128, **v2.list_map("name"), **_IMMUTABLE},
}
_CONTAINER_MARKS: dict[str, dict[str, Any]] = {
    "name": _NAME,
    "env": {"maxItems": 128, **v2.list_map("name")},
    "volumeMounts": {"maxItems": 128, **v2.list_map("name")},
}


def _container_patch() -> dict[str, Any]:
    fields = kube_schema("core.v1.Container")["properties"]
    properties = {
        field: fields[field] | _CONTAINER_MARKS.get(field, {})
        for field in sorted(PATCH_CONTAINER_FIELDS)
    }
    return _object(properties, ("name",))


def _pod_spec_patch() -> dict[str, Any]:
    fields = kube_schema("core.v1.PodSpec")["properties"]
    properties = {}
    for field in sorted(PATCH_POD_FIELDS):
        if field in ("containers", "initContainers"):
            base = {"type": "array", "items": _container_patch()}
        elif field == "imagePullSecrets":
            base = {"type": "array", "items": _object_reference()}
        else:
            base = _own_field(fields[field])
        properties[field] = base | _POD_MARKS.get(field, {})
    return _object(properties)


def _own_field(field: dict[str, Any]) -> dict[str, Any]:
    """A PodSpec field as Trainer's PodSpecPatch re-declares it: the value's type, without the
    markers k8s.io/api puts on PodSpec's own field (a list's or a map's type; _POD_MARKS holds
    Trainer's)."""
    dropped = {"x-kubernetes-list-type", "x-kubernetes-list-map-keys"}
    if "additionalProperties" in field:
        dropped.add("x-kubernetes-map-type")
    return {k: v for k, v in field.items() if k not in dropped}


def _runtime_patch() -> dict[str, Any]:
    meta = copy.deepcopy(EMBEDDED_METADATA)
    pod = _object({"metadata": meta, "spec": _pod_spec_patch()})
    job = _object({"metadata": copy.deepcopy(meta), "spec": _object({"template": pod})})
    replicated = _object({"name": _NAME, "template": job}, ("name",))
    jobs = {"type": "array", "items": replicated, "maxItems": 100, **v2.list_map("name")}
    jobset = _object({"metadata": copy.deepcopy(meta), "spec": _object({"replicatedJobs": jobs})})
    return _object({"template": jobset})


_TRAINJOB_PARTS = {
    "spec.trainer.env[]": _env,
    "spec.trainer.resourcesPerNode": _resources,
    "spec.initializer.dataset.env[]": _env,
    "spec.initializer.dataset.secretRef": _object_reference,
    "spec.initializer.model.env[]": _env,
    "spec.initializer.model.secretRef": _object_reference,
    "spec.runtimePatches[].trainingRuntimeSpec": _runtime_patch,
}
_RUNTIME_PARTS = {
    "spec.template.metadata": lambda: copy.deepcopy(EMBEDDED_METADATA),
    "spec.template.spec.replicatedJobs[].template": _job_template,
    "spec.template.spec.volumeClaimPolicies[].templates[]": _claim_template,
}
