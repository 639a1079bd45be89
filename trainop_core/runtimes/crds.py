"""The CRDs of trainer.kubeflow.org/v1alpha1, generated from the models as the v1 kinds' are.

Committed under operator/trainer/crds (tests/deploy/test_trainer_manifests.py keeps them equal).
Kubernetes-typed parts the models keep as plain data (env, resources, a runtime's JobSet
template, runtime patches) keep unknown fields; trainop's own validation checks their shape.
"""

from __future__ import annotations

from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.crds import structural

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
    version: dict[str, Any] = {
        "name": v2.VERSION,
        "served": True,
        "storage": True,
        "additionalPrinterColumns": [_STATE, _AGE] if status else [_AGE],
        "schema": {"openAPIV3Schema": _schema(model)},
    }
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
    schema = structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}  # the API server owns ObjectMeta
    schema["properties"]["kind"] = {"type": "string"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema.pop("required", None)
    return schema
