"""Pod-template shape checks against the Kubernetes field table, and container helpers.

A replica's `template` is kept as plain data so every pod field survives untouched; this module
checks its shape the way the API server would (unknown fields, wrong value types, required fields)
without importing `kubernetes`: the table in `k8s_types.json` is generated from the client's models
by `scripts/gen_k8s_types.py`. Problems carry full dotted paths, e.g.
`spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagee: unknown field`.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from importlib import resources
from typing import Any

from trainop_core.errors import Problem

ROOT_MODEL = "V1PodTemplateSpec"

# Fields the client's models refuse to leave unset (their setters reject None). The generated table
# does not record this yet; tests/core/test_api_podtemplate.py keeps this in step with the client.
# V1PodSpec.containers is left to api/validation.py, which says "at least one container" instead.
REQUIRED: Mapping[str, tuple[str, ...]] = {
    "V1AWSElasticBlockStoreVolumeSource": ("volumeID",),
    "V1AppArmorProfile": ("type",),
    "V1AzureDiskVolumeSource": ("diskName", "diskURI"),
    "V1AzureFileVolumeSource": ("secretName", "shareName"),
    "V1CSIVolumeSource": ("driver",),
    "V1CephFSVolumeSource": ("monitors",),
    "V1CinderVolumeSource": ("volumeID",),
    "V1ClusterTrustBundleProjection": ("path",),
    "V1ConfigMapKeySelector": ("key",),
    "V1Container": ("name",),
    "V1ContainerPort": ("containerPort",),
    "V1ContainerResizePolicy": ("resourceName", "restartPolicy"),
    "V1DownwardAPIVolumeFile": ("path",),
    "V1EnvVar": ("name",),
    "V1EphemeralContainer": ("name",),
    "V1FlexVolumeSource": ("driver",),
    "V1GCEPersistentDiskVolumeSource": ("pdName",),
    "V1GRPCAction": ("port",),
    "V1GitRepoVolumeSource": ("repository",),
    "V1GlusterfsVolumeSource": ("endpoints", "path"),
    "V1HTTPGetAction": ("port",),
    "V1HTTPHeader": ("name", "value"),
    "V1HostAlias": ("ip",),
    "V1HostPathVolumeSource": ("path",),
    "V1ISCSIVolumeSource": ("iqn", "lun", "targetPortal"),
    "V1KeyToPath": ("key", "path"),
    "V1LabelSelectorRequirement": ("key", "operator"),
    "V1NFSVolumeSource": ("path", "server"),
    "V1NodeSelector": ("nodeSelectorTerms",),
    "V1NodeSelectorRequirement": ("key", "operator"),
    "V1ObjectFieldSelector": ("fieldPath",),
    "V1OwnerReference": ("apiVersion", "kind", "name", "uid"),
    "V1PersistentVolumeClaimTemplate": ("spec",),
    "V1PersistentVolumeClaimVolumeSource": ("claimName",),
    "V1PhotonPersistentDiskVolumeSource": ("pdID",),
    "V1PodAffinityTerm": ("topologyKey",),
    "V1PodOS": ("name",),
    "V1PodReadinessGate": ("conditionType",),
    "V1PodResourceClaim": ("name",),
    "V1PodSchedulingGate": ("name",),
    "V1PortworxVolumeSource": ("volumeID",),
    "V1PreferredSchedulingTerm": ("preference", "weight"),
    "V1QuobyteVolumeSource": ("registry", "volume"),
    "V1RBDVolumeSource": ("image", "monitors"),
    "V1ResourceClaim": ("name",),
    "V1ResourceFieldSelector": ("resource",),
    "V1ScaleIOVolumeSource": ("gateway", "secretRef", "system"),
    "V1SeccompProfile": ("type",),
    "V1SecretKeySelector": ("key",),
    "V1ServiceAccountTokenProjection": ("path",),
    "V1SleepAction": ("seconds",),
    "V1Sysctl": ("name", "value"),
    "V1TCPSocketAction": ("port",),
    "V1TopologySpreadConstraint": ("maxSkew", "topologyKey", "whenUnsatisfiable"),
    "V1TypedLocalObjectReference": ("kind", "name"),
    "V1TypedObjectReference": ("kind", "name"),
    "V1Volume": ("name",),
    "V1VolumeDevice": ("devicePath", "name"),
    "V1VolumeMount": ("mountPath", "name"),
    "V1VsphereVirtualDiskVolumeSource": ("volumePath",),
    "V1WeightedPodAffinityTerm": ("podAffinityTerm", "weight"),
}

# Fields typed as strings in the client but holding resource quantities, which YAML users write
# as numbers as often as strings (`cpu: 2`, `memory: 4Gi`).
QUANTITY_FIELDS = frozenset(
    {
        ("V1ResourceRequirements", "limits"),
        ("V1ResourceRequirements", "requests"),
        ("V1VolumeResourceRequirements", "limits"),
        ("V1VolumeResourceRequirements", "requests"),
        ("V1PodSpec", "overhead"),
        ("V1EmptyDirVolumeSource", "sizeLimit"),
        ("V1ResourceFieldSelector", "divisor"),
    }
)

# Kubernetes' serialised quantity: a signed decimal with an SI, binary-SI or exponent suffix.
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")


@functools.cache
def k8s_types() -> dict[str, dict[str, str]]:
    """The generated field table: model name -> {json field: type in the client's notation}."""
    text = resources.files("trainop_core.api").joinpath("k8s_types.json").read_text()
    table: dict[str, dict[str, str]] = json.loads(text)
    return table


def check_template(template: Any, path: str) -> list[Problem]:
    """Every shape problem in a pod template (a V1PodTemplateSpec), with paths under `path`."""
    return check_value(template, ROOT_MODEL, path)


def check_value(value: Any, type_name: str, path: str, quantity: bool = False) -> list[Problem]:
    """Problems in `value` read as `type_name` (client notation); null is always allowed."""
    if value is None:
        return []
    if match := _LIST.match(type_name):
        return _check_list(value, match.group(1), path, quantity)
    if match := _DICT.match(type_name):
        return _check_map(value, match.group(1), path, quantity)
    if type_name in k8s_types():
        return _check_object(value, type_name, path)
    return _check_scalar(value, type_name, path, quantity)


def _check_object(value: Any, model: str, path: str) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem(path, f"expected a mapping, got {describe(value)}")]
    fields = k8s_types()[model]
    problems: list[Problem] = []
    for key, item in value.items():
        sub = join(path, str(key))
        if key not in fields:
            problems.append(Problem(sub, unknown_field_message(str(key), fields)))
        else:
            problems += check_value(item, fields[key], sub, (model, key) in QUANTITY_FIELDS)
    for key in REQUIRED.get(model, ()):
        if value.get(key) is None:
            problems.append(Problem(join(path, key), "required field is missing"))
    return problems


def _check_list(value: Any, item_type: str, path: str, quantity: bool) -> list[Problem]:
    if not isinstance(value, list):
        return [Problem(path, f"expected a list, got {describe(value)}")]
    problems: list[Problem] = []
    for index, item in enumerate(value):
        problems += check_value(item, item_type, f"{path}[{index}]", quantity)
    return problems


def _check_map(value: Any, item_type: str, path: str, quantity: bool) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem(path, f"expected a mapping, got {describe(value)}")]
    problems: list[Problem] = []
    for key, item in value.items():
        problems += check_value(item, item_type, join(path, str(key)), quantity)
    return problems


def _check_scalar(value: Any, type_name: str, path: str, quantity: bool) -> list[Problem]:
    expected = _scalar_mismatch(value, type_name, quantity)
    return [Problem(path, f"expected {expected}, got {describe(value)}")] if expected else []


def _scalar_mismatch(value: Any, type_name: str, quantity: bool) -> str:
    """What was expected if `value` does not fit, else ""."""
    if quantity:
        ok = is_number(value) or (isinstance(value, str) and bool(_QUANTITY.match(value)))
        if not ok:
            return "a quantity such as 2, 500m or 4Gi"
        if is_number(value) and not math.isfinite(value):
            return "a finite number"
        return "" if quantity_in_bounds(value) else f"a quantity of at most {MAX_QUANTITY} (2^63-1)"
    if type_name == "str":
        return "" if isinstance(value, str) else "a string"
    if type_name == "int":
        return "" if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if type_name == "bool":
        return "" if isinstance(value, bool) else "true or false"
    if type_name == "datetime":
        return "" if isinstance(value, str | dt.datetime | dt.date) else "an RFC 3339 time"
    if type_name == "object":
        return ""  # IntOrString ports and free-form fieldsV1: the client cannot say more
    return ""


# Kubernetes bounds every quantity at 2^63-1 of its unit (it caps larger ones; trainop refuses
# them, as it refuses such queue quotas: a value nothing downstream can hold is a mistake).
MAX_QUANTITY = 2**63 - 1
_SUFFIX_POWERS = {"Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "Ti": (2, 40), "Pi": (2, 50)}
_SUFFIX_POWERS |= {"Ei": (2, 60), "n": (10, -9), "u": (10, -6), "m": (10, -3), "k": (10, 3)}
_SUFFIX_POWERS |= {"M": (10, 6), "G": (10, 9), "T": (10, 12), "P": (10, 15), "E": (10, 18)}


def quantity_in_bounds(value: Any) -> bool:
    """Whether a well-formed quantity (a number, or a string `_QUANTITY` matches) is finite
    and at most MAX_QUANTITY in magnitude; a huge exponent is never expanded."""
    if is_number(value):
        return math.isfinite(value) and abs(value) <= MAX_QUANTITY
    match = _QUANTITY.match(str(value))
    if match is None:
        return False
    number, suffix = match.group(1), match.group(3) or ""
    base, power = _SUFFIX_POWERS.get(suffix, (10, 0))
    if suffix not in _SUFFIX_POWERS and suffix:  # an exponent: e3, E-2
        power = int(suffix[1:]) if len(suffix) <= 12 else 10**12 * (-1 if "-" in suffix else 1)
    if abs(power) > 400:  # decided by the exponent alone, never expanded
        return power < 0 or Decimal(number) == 0
    return abs(Decimal(number) * Decimal(base) ** power) <= MAX_QUANTITY


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def join(path: str, key: str) -> str:
    """Append a field or map key to a dotted path; keys holding dots or slashes get brackets."""
    if "." in key or "/" in key:
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: Any) -> str:
    """A short rendering of a wrong value for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:37] + "...")
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return repr(value)


def unknown_field_message(key: str, known: Mapping[str, Any] | list[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f'unknown field (did you mean "{close[0]}"?)' if close else "unknown field"


# --- container helpers ------------------------------------------------------------------------


def containers(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The template's containers (an empty list when the template has none or is malformed)."""
    spec = template.get("spec")
    found = spec.get("containers") if isinstance(spec, Mapping) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def find_container(template: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The container called `name`, if any."""
    return next((c for c in containers(template) if c.get("name") == name), None)


def default_container(template: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """Upstream's choice of the training container: the one called `name`, else the first."""
    found = find_container(template, name)
    if found is not None:
        return found
    listed = containers(template)
    return listed[0] if listed else None
