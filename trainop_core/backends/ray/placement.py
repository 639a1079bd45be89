"""How a job is placed on a Ray cluster: one placement group, one bundle per replica. Pure.

Bundles follow the replicas' order (`trainop_core.replicas`: master/chief first, then workers,
then the rest), so bundle i is always the same replica. A bundle holds what the replica's
containers request (limits where a request is missing, as Kubernetes defaults it): `cpu` -> CPU,
`memory` -> memory (bytes), `nvidia.com/gpu` -> GPU. A replica that requests no CPU gets one
CPU, as a Ray Train worker does; Ray refuses empty bundles. Init containers run before the main
container, so a bundle holds the larger of their requests and the main container's.

The placement group is all or nothing (Ray reserves every bundle or none); it has at most
`MAX_BUNDLES` bundles. The strategy is PACK
unless the job's annotation `ray.trainop.dev/placement-strategy` asks for SPREAD, STRICT_PACK (one
node) or STRICT_SPREAD (one replica per node). A job that cannot be placed waits
`spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds` (default 300 s), then fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.backends.process.podspec import default_container
from trainop_core.errors import Problem
from trainop_core.gang import parse_quantity
from trainop_core.kinds.base import Kind
from trainop_core.replicas import replica_counts, replica_id

STRATEGY_ANNOTATION = "ray.trainop.dev/placement-strategy"
RUNTIME_ENV_ANNOTATION = "ray.trainop.dev/runtime-env"
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
DEFAULT_STRATEGY = "PACK"
DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 300.0
# trainop's bound on one job's replicas (one placement group reserves them all at once); a job
# of 10^9 replicas is refused before anything is listed for it.
MAX_BUNDLES = 10_000
# Kubernetes resource name -> Ray resource name (and how a quantity becomes a Ray amount).
RESOURCES = {"cpu": "CPU", "memory": "memory", "nvidia.com/gpu": "GPU"}
# Runtime-env fields a job may add through its annotation; working_dir is trainop's own.
RUNTIME_ENV_FIELDS = ("env_vars", "pip", "uv", "conda", "py_modules", "excludes", "config")


@dataclass(frozen=True)
class Placement:
    """The placement group a job needs: bundle i is replica `replicas[i]`."""

    replicas: tuple[str, ...]
    bundles: tuple[dict[str, float], ...]
    strategy: str
    timeout_seconds: float

    def bundle_of(self, replica: str) -> int:
        return self.replicas.index(replica)

    def describe(self) -> str:
        """`3 bundles {CPU: 1} x2 + {CPU: 2, GPU: 1}, PACK` for messages."""
        groups: dict[str, int] = {}
        for bundle in self.bundles:
            text = "{" + ", ".join(f"{k}: {_amount(v)}" for k, v in sorted(bundle.items())) + "}"
            groups[text] = groups.get(text, 0) + 1
        parts = [f"{text} x{n}" if n > 1 else text for text, n in groups.items()]
        return f"{len(self.bundles)} bundle(s) {' + '.join(parts)}, {self.strategy}"


def _amount(value: float) -> str:
    if value >= 1024**2 and value == int(value):
        return f"{value / 1024**3:.3g}GiB"
    return f"{value:g}"


def placement_for(job: TrainingJob, kind: Kind) -> tuple[Placement | None, list[Problem]]:
    """The job's placement, or the problems that prevent it (each naming its field). Pure."""
    problems: list[Problem] = []
    replicas: list[str] = []
    bundles: list[dict[str, float]] = []
    counts = replica_counts(job, kind)
    if sum(counts.values()) > MAX_BUNDLES:  # before one bundle is listed: bounded memory
        message = (
            f"the job has {sum(counts.values())} replicas; the Ray backend places at most "
            f"{MAX_BUNDLES} (one bundle of one placement group each)"
        )
        return None, [Problem(f"spec.{kind.replica_field}", message)]
    for rtype, count in counts.items():
        spec = _replica_spec(job, rtype)
        bundle = bundle_for(spec.template if spec else {}, kind, rtype, problems)
        for index in range(count):
            replicas.append(replica_id(rtype, index))
            bundles.append(dict(bundle))
    strategy = _strategy(job, problems)
    runtime_env_problems(job, problems)
    if problems:
        return None, problems
    return Placement(tuple(replicas), tuple(bundles), strategy, schedule_timeout(job)), []


def _replica_spec(job: TrainingJob, rtype: str) -> Any:
    for name, spec in job.spec.replica_specs.items():
        if name.lower() == rtype.lower():
            return spec
    return None


def bundle_for(
    template: Mapping[str, Any], kind: Kind, rtype: str, problems: list[Problem]
) -> dict[str, float]:
    """The bundle of one replica of type `rtype` (problems are appended to `problems`)."""
    pod = template.get("spec") or {}
    containers = pod.get("containers") or []
    if not containers:
        return {"CPU": 1.0}
    main = default_container(containers, kind.default_container)
    base = f"spec.{kind.replica_field}.{rtype}.template.spec"
    wanted = _requests(main, f"{base}.containers[{containers.index(main)}]", problems)
    for i, init in enumerate(pod.get("initContainers") or []):
        for name, amount in _requests(init, f"{base}.initContainers[{i}]", problems).items():
            wanted[name] = max(wanted.get(name, 0.0), amount)
    wanted.setdefault("CPU", 1.0)
    if wanted["CPU"] <= 0:
        wanted["CPU"] = 1.0
    return {name: amount for name, amount in wanted.items() if amount > 0}


def _requests(container: Mapping[str, Any], path: str, problems: list[Problem]) -> dict[str, float]:
    resources = container.get("resources") or {}
    requested = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    found: dict[str, float] = {}
    for name, ray_name in RESOURCES.items():
        if name not in requested:
            continue
        field = "requests" if name in (resources.get("requests") or {}) else "limits"
        try:
            amount = parse_quantity(requested[name])
        except (InvalidOperation, ValueError):
            problems.append(Problem(f"{path}.resources.{field}.{name}", "is not a quantity"))
            continue
        if amount < 0:
            problems.append(Problem(f"{path}.resources.{field}.{name}", "must not be negative"))
            continue
        found[ray_name] = _ray_amount(ray_name, amount)
    return found


def _ray_amount(ray_name: str, amount: Decimal) -> float:
    if ray_name == "memory":
        return float(int(amount))  # bytes, whole
    return float(amount)


def _strategy(job: TrainingJob, problems: list[Problem]) -> str:
    value = (job.metadata.annotations or {}).get(STRATEGY_ANNOTATION)
    if value is None:
        return DEFAULT_STRATEGY
    if value.upper() not in STRATEGIES:
        path = f"metadata.annotations[{STRATEGY_ANNOTATION}]"
        problems.append(Problem(path, f"is {value!r}, expected one of {', '.join(STRATEGIES)}"))
        return DEFAULT_STRATEGY
    return value.upper()


def schedule_timeout(job: TrainingJob) -> float:
    """How long the job may wait to be placed (scheduleTimeoutSeconds, else the default)."""
    policy = job.spec.run_policy.scheduling_policy
    if policy is not None and policy.schedule_timeout_seconds is not None:
        return float(policy.schedule_timeout_seconds)
    return DEFAULT_SCHEDULE_TIMEOUT_SECONDS


def runtime_env_problems(job: TrainingJob, problems: list[Problem]) -> dict[str, Any]:
    """The extra runtime env a job's annotation asks for (a JSON object), checked field by field."""
    text = (job.metadata.annotations or {}).get(RUNTIME_ENV_ANNOTATION)
    if text is None:
        return {}
    path = f"metadata.annotations[{RUNTIME_ENV_ANNOTATION}]"
    try:
        value = json.loads(text)
    except ValueError as exc:
        problems.append(Problem(path, f"is not JSON: {exc}"))
        return {}
    if not isinstance(value, dict):
        problems.append(Problem(path, "must be a JSON object"))
        return {}
    unknown = sorted(set(value) - set(RUNTIME_ENV_FIELDS))
    if unknown:
        allowed = ", ".join(RUNTIME_ENV_FIELDS)
        problems.append(Problem(path, f"has unsupported field(s) {unknown} (allowed: {allowed})"))
        return {}
    before = len(problems)
    for name in ("excludes", "py_modules"):
        items = value.get(name, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            problems.append(Problem(f"{path}.{name}", "must be a list of strings"))
    for i, module in enumerate(value.get("py_modules") or []):
        if isinstance(module, str) and "://" not in module:
            problems.append(
                Problem(
                    f"{path}.py_modules[{i}]",
                    f"{module!r} is a local path, which a job cannot ship (only its directory is "
                    "shipped); give a URI (s3://, gs://, https://) or put the module there",
                )
            )
    return value if len(problems) == before else {}


def extra_runtime_env(job: TrainingJob) -> dict[str, Any]:
    """The annotation's runtime env (call after `placement_for` found no problems)."""
    return runtime_env_problems(job, [])


def distinct_ports(endpoints: Iterable[tuple[str, str, int]]) -> list[str]:
    """Replicas (ids) whose (ip, port) another replica listed earlier already has."""
    seen: set[tuple[str, int]] = set()
    clashes = []
    for replica, ip, port in endpoints:
        if (ip, port) in seen:
            clashes.append(replica)
        seen.add((ip, port))
    return clashes


def unschedulable_message(
    job: str,
    placement: Placement,
    timeout: float,
    what: str,
    resources: tuple[Mapping[str, float], Mapping[str, float]],
) -> str:
    """Why `job` was not placed: what it needs, what the cluster has (`resources`: in all, free)."""
    wanted = ("CPU", "GPU", "memory")
    have = {k: v for k, v in resources[0].items() if k in wanted}
    free = {k: v for k, v in resources[1].items() if k in wanted}
    return (
        f"{job} could not be placed on the Ray cluster within {timeout:g} s (waiting for its "
        f"{what}): it needs {placement.describe()}; the cluster has {_fmt(have)} in all, "
        f"{_fmt(free)} free"
    )


def _fmt(resources: dict[str, float]) -> str:
    return json.dumps({k: round(v, 3) for k, v in sorted(resources.items())})
