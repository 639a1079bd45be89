"""The API server's own bounds, and the pod rules a job's templates can break.

Upstream's webhook checks a job's shape; the API server then refuses what its Go types or its pod
validation cannot hold. A job refused there (or, worse, accepted here and then failing deep inside
a backend: a TTL of 10**23 overflows every clock) must be refused here first, with its field path:

- integers: every integer of a job's spec is an int32 upstream, except
  `runPolicy.activeDeadlineSeconds` (int64); a pod template's integers are int32 or int64 as in
  the Kubernetes API; no number anywhere may be NaN or infinite (JSON cannot carry them);
- pod rules: container names are DNS labels, unique across containers, init containers and
  ephemeral containers; ports are 1-65535 with IANA service names unique per container; volume
  names are unique DNS labels and every volume mount names a volume; env names are printable
  ASCII without "=";
- run-policy consistency upstream lacks: a gang's `minAvailable` cannot exceed the job's replicas.

Pure functions over the wire form; `validate_job` calls `bounds_problems`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from trainop_core.api.podtemplate import join
from trainop_core.errors import Problem

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob
    from trainop_core.kinds.base import Kind

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
PORT = (1, 65535)

# Spec integers that are int64 upstream (every other one is an int32).
_INT64_SPEC_FIELDS = frozenset({"spec.runPolicy.activeDeadlineSeconds"})
# Pod-template integers that are int64 in the Kubernetes API (every other one is an int32).
_INT64_POD_FIELDS = frozenset(
    {
        "activeDeadlineSeconds",
        "deletionGracePeriodSeconds",
        "expirationSeconds",
        "fsGroup",
        "generation",
        "runAsGroup",
        "runAsUser",
        "seconds",
        "supplementalGroups",
        "terminationGracePeriodSeconds",
        "tolerationSeconds",
    }
)
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SVC_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PROTOCOLS = ("TCP", "UDP", "SCTP")


def bounds_problems(job: TrainingJob, kind: Kind) -> list[Problem]:
    """Every bound or pod rule the (defaulted) job breaks; empty when the API server would take
    it. Pure."""
    # Python mode: JSON mode would turn an infinite float into null before we could see it.
    wire = job.model_dump(by_alias=True, exclude_none=True)
    spec = wire.get("spec") or {}
    templates = {
        join(f"spec.{kind.replica_field}", rtype) + ".template": replica.get("template") or {}
        for rtype, replica in (spec.get(kind.replica_field) or {}).items()
    }
    problems = _number_problems(wire, templates)
    problems += _replica_type_problems(spec.get(kind.replica_field) or {}, kind.replica_field)
    for path, template in templates.items():
        problems += pod_problems(template.get("spec") or {}, f"{path}.spec")
    return problems + _gang_problems(job)


# --- numbers -----------------------------------------------------------------------------------


def _number_problems(wire: Mapping[str, Any], templates: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for path, field, value in _numbers(wire, ""):
        if isinstance(value, float):
            if not math.isfinite(value):
                problems.append(Problem(path, f"expected a finite number, got {value!r}"))
            continue
        in_template = any(path.startswith(f"{t}.") for t in templates)
        if not path.startswith("spec."):
            continue  # metadata/status: the models already bound what matters there
        int64 = (
            field in _INT64_POD_FIELDS
            if in_template
            else _plain(path) in _INT64_SPEC_FIELDS
        )  # fmt: skip
        problems += int_range(value, path, INT64 if int64 else INT32)
    return problems


def template_number_problems(template: Any, path: str) -> list[Problem]:
    """The numbers of a Kubernetes object template (a Job's or a pod's) out of what its Go
    fields hold: int64 where the Kubernetes API says so, every other integer an int32."""
    problems: list[Problem] = []
    for where, field, value in _numbers(template, path):
        if isinstance(value, float):
            if not math.isfinite(value):
                problems.append(Problem(where, f"expected a finite number, got {value!r}"))
            continue
        problems += int_range(value, where, INT64 if field in _INT64_POD_FIELDS else INT32)
    return problems


def _plain(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path)


def int_range(value: int, path: str, bounds: tuple[int, int]) -> list[Problem]:
    """A problem if `value` lies outside `bounds` (inclusive), naming the type it must fit."""
    low, high = bounds
    if low <= value <= high:
        return []
    width = {INT32: " (a 32-bit integer)", INT64: " (a 64-bit integer)"}.get(bounds, "")
    limit = f"at most {high}" if value > high else f"at least {low}"
    digits = int(value.bit_length() * 0.30103) + 1  # str() of a huge int may refuse to work
    shown = f"{value}" if abs(value) < 10**30 else f"an integer of about {digits} digits"
    return [Problem(path, f"must be {limit}{width}, got {shown}")]


def _numbers(node: Any, path: str, field: str = "") -> Iterator[tuple[str, str, int | float]]:
    """(path, field name, value) of every int and float in a wire tree (not booleans)."""
    if isinstance(node, bool):
        return
    if isinstance(node, int | float):
        yield path, field, node
    elif isinstance(node, Mapping):
        for key, value in node.items():
            yield from _numbers(value, join(path, str(key)), str(key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _numbers(item, f"{path}[{index}]", field)


# --- names -----------------------------------------------------------------------------------


def _replica_type_problems(specs: Mapping[str, Any], field: str) -> list[Problem]:
    """Pods, services, labels and local log files are named after the lowercased replica type,
    so it must be DNS-label material (TFJob accepts replica types beyond its own)."""
    return [
        Problem(
            join(f"spec.{field}", rtype),
            f"replica type {_shown(rtype)} cannot name pods: use letters, digits and '-', "
            "starting and ending with a letter or digit",
        )
        for rtype in specs
        if not (len(rtype) <= 63 and _DNS_LABEL.match(rtype.lower()))
    ]


# --- pod rules ---------------------------------------------------------------------------------


def pod_problems(pod_spec: Mapping[str, Any], path: str) -> list[Problem]:
    """The API server's pod-spec rules a template can break (names, ports, volumes, env)."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for field, index, container in _containers(pod_spec):
        where = f"{path}.{field}[{index}]"
        name = container.get("name")
        if isinstance(name, str):
            problems += _label_problems(name, f"{where}.name")
            if name in seen:
                problems.append(Problem(f"{where}.name", f"duplicates {seen[name]}.name"))
            seen.setdefault(name, where)
        problems += _port_problems(container.get("ports"), f"{where}.ports")
        problems += env_problems(container.get("env"), f"{where}.env")
    return problems + _volume_problems(pod_spec, path)


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    for field in _CONTAINER_LISTS:
        listed = pod_spec.get(field)
        for index, container in enumerate(listed if isinstance(listed, list) else []):
            if isinstance(container, Mapping):
                yield field, index, container


def _label_problems(name: str, path: str) -> list[Problem]:
    if len(name) <= 63 and _DNS_LABEL.match(name):
        return []
    return [
        Problem(
            path,
            f"{_shown(name)} is not a valid DNS label: at most 63 lowercase letters, digits and "
            "'-', starting and ending with a letter or digit",
        )
    ]


def _port_problems(ports: Any, path: str) -> list[Problem]:
    problems: list[Problem] = []
    names: dict[str, int] = {}
    for index, port in enumerate(ports if isinstance(ports, list) else []):
        if not isinstance(port, Mapping):
            continue
        where = f"{path}[{index}]"
        number = port.get("containerPort")
        if isinstance(number, int) and not isinstance(number, bool):
            problems += _port_range(number, f"{where}.containerPort")
        host = port.get("hostPort")
        if isinstance(host, int) and not isinstance(host, bool) and host != 0:
            problems += _port_range(host, f"{where}.hostPort")
        protocol = port.get("protocol")
        if isinstance(protocol, str) and protocol not in _PROTOCOLS:
            problems.append(Problem(f"{where}.protocol", "expected one of TCP, UDP, SCTP"))
        name = port.get("name")
        if isinstance(name, str):
            problems += _service_name_problems(name, f"{where}.name")
            if name in names:
                problems.append(Problem(f"{where}.name", f"duplicates {path}[{names[name]}].name"))
            names.setdefault(name, index)
    return problems


def _port_range(number: int, path: str) -> list[Problem]:
    if PORT[0] <= number <= PORT[1]:
        return []
    return [Problem(path, f"must be a port number from 1 to 65535, got {_shown(number)}")]


def _service_name_problems(name: str, path: str) -> list[Problem]:
    ok = (
        0 < len(name) <= 15
        and bool(_SVC_NAME.match(name))
        and "--" not in name
        and any(c.isalpha() for c in name)
    )
    if ok:
        return []
    return [
        Problem(
            path,
            f"{_shown(name)} is not a valid port name: at most 15 lowercase letters, digits and "
            "'-' with at least one letter, no '--', starting and ending with a letter or digit",
        )
    ]


def env_problems(env: Any, path: str) -> list[Problem]:
    problems: list[Problem] = []
    for index, entry in enumerate(env if isinstance(env, list) else []):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and not _env_name_ok(name):
            message = f"{_shown(name)}: an env name is printable ASCII without '='"
            problems.append(Problem(f"{path}[{index}].name", message))
    return problems


def _env_name_ok(name: str) -> bool:
    return bool(name) and all(" " <= c <= "~" for c in name) and "=" not in name


def _volume_problems(pod_spec: Mapping[str, Any], path: str) -> list[Problem]:
    volumes = pod_spec.get("volumes")
    problems: list[Problem] = []
    known: dict[str, int] = {}
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        name = volume.get("name") if isinstance(volume, Mapping) else None
        if not isinstance(name, str):
            continue
        where = f"{path}.volumes[{index}].name"
        problems += _label_problems(name, where)
        if name in known:
            problems.append(Problem(where, f"duplicates {path}.volumes[{known[name]}].name"))
        known.setdefault(name, index)
    for field, index, container in _containers(pod_spec):
        mounts = container.get("volumeMounts")
        for at, mount in enumerate(mounts if isinstance(mounts, list) else []):
            name = mount.get("name") if isinstance(mount, Mapping) else None
            if isinstance(name, str) and name not in known:
                where = f"{path}.{field}[{index}].volumeMounts[{at}].name"
                problems.append(Problem(where, f"{_shown(name)} names no volume of this pod"))
    return problems


def _shown(value: Any) -> str:
    # JSON's escapes: a control character in a name never reaches a terminal as it is
    text = repr(value) if not isinstance(value, str) else json.dumps(value[:60])
    return text if len(text) <= 42 else text[:39] + '..."'


# --- run policy --------------------------------------------------------------------------------


def total_replicas(job: TrainingJob) -> int:
    """Replicas of every type (a replica type without a count has one)."""
    return sum(
        spec.replicas if spec.replicas is not None else 1
        for spec in job.spec.replica_specs.values()
    )


def _gang_problems(job: TrainingJob) -> list[Problem]:
    policy = job.spec.run_policy.scheduling_policy
    wanted = policy.min_available if policy is not None else None
    total = total_replicas(job)
    if wanted is None or wanted <= total:
        return []
    message = (
        f"is {wanted} but the job has {total} replica(s) in all: "
        "a gang that large could never be scheduled"
    )
    return [Problem("spec.runPolicy.schedulingPolicy.minAvailable", message)]
