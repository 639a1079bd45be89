"""Upstream's validating-webhook rules, and `prepare`: the one call every backend makes.

`validate_job` runs on a defaulted job and returns every problem (never raises); each kind adds its
own rules (cardinalities, options) through `kind.validate`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainop_core.api.bounds import bounds_problems
from trainop_core.api.defaults import apply_defaults
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import (
    Document,
    KindLookup,
    Source,
    default_registry,
    exactly_one,
    job_label,
    model_data,
    parse_document,
    raise_all,
    read_documents,
)
from trainop_core.api.podtemplate import containers, describe
from trainop_core.api.types import MANAGED_BY_VALUES
from trainop_core.errors import InvalidJobError, Problem

if TYPE_CHECKING:
    from trainop_core.kinds.base import Kind

MAX_NAME = 63  # a DNS label, the limit for every pod and service name derived from the job
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate_job(job: TrainingJob, kind: Kind) -> list[Problem]:
    """Every webhook-rule problem of a (defaulted) job; an empty list means valid."""
    field = f"spec.{kind.replica_field}"
    problems = check_metadata(job.metadata.name, job.metadata.namespace)
    problems += _check_pod_name_length(job, kind)
    problems += _check_replica_types(job, kind, field)
    for rtype, spec in job.spec.replica_specs.items():
        problems += _check_containers(spec.template, kind, f"{field}.{rtype}.template.spec")
    problems += _check_managed_by(job.spec.run_policy.managed_by)
    return problems + kind.validate(job) + bounds_problems(job, kind)


def check_metadata(name: Any, namespace: Any) -> list[Problem]:
    """Name and namespace rules; works on raw values so loading can report them too."""
    problems: list[Problem] = []
    if not name:
        problems.append(Problem("metadata.name", "required field is missing"))
    elif not isinstance(name, str):
        problems.append(Problem("metadata.name", f"expected a string, got {describe(name)}"))
    elif len(name) > MAX_NAME:
        problems.append(Problem("metadata.name", f"must be at most {MAX_NAME} characters"))
    elif not _DNS1035.match(name):
        problems.append(Problem("metadata.name", _label_message(name, "a lowercase letter")))
    if isinstance(namespace, str) and not (
        len(namespace) <= MAX_NAME and _DNS1123.match(namespace)
    ):
        problems.append(
            Problem("metadata.namespace", _label_message(namespace, "a letter or digit"))
        )
    return problems


def _label_message(value: str, first: str) -> str:
    return (
        f"{describe(value)} is not a valid DNS label: use lowercase letters, digits and '-', "
        f"start with {first} and end with a letter or digit"
    )


def _check_pod_name_length(job: TrainingJob, kind: Kind) -> list[Problem]:
    # Pods and services are named <job>-<replica type>-<index>; each must itself be a DNS label.
    name = job.metadata.name
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        return []
    longest = max(
        (
            f"{name}-{rtype.lower()}-{max((spec.replicas or 1) - 1, 0)}"
            for rtype, spec in _specs(job)
        ),
        key=len,
        default="",
    )
    if len(longest) <= MAX_NAME:
        return []
    room = MAX_NAME - (len(longest) - len(name))
    return [
        Problem(
            "metadata.name",
            f'is too long for its pods: pod name "{longest}" would be {len(longest)} '
            f"characters, the limit is {MAX_NAME}; use a name of at most {room} characters",
        )
    ]


def _specs(job: TrainingJob) -> list[tuple[str, Any]]:
    return list(job.spec.replica_specs.items())


def _check_replica_types(job: TrainingJob, kind: Kind, field: str) -> list[Problem]:
    specs = job.spec.replica_specs
    if not specs:
        return [Problem(field, "must have at least one replica type")]
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    allowed = ", ".join(kind.replica_types)
    for rtype in specs:
        canonical = kind.canonical_replica_type(rtype)
        if canonical in seen:
            message = f"duplicates {seen[canonical]} (replica types are case-insensitive)"
            problems.append(Problem(f"{field}.{rtype}", message))
        seen.setdefault(canonical, rtype)
        if kind.restrict_replica_types and canonical not in kind.replica_types:
            message = f"unknown replica type for {kind.kind}; expected one of {allowed}"
            problems.append(Problem(f"{field}.{rtype}", message))
    return problems


def _check_containers(template: Mapping[str, Any], kind: Kind, path: str) -> list[Problem]:
    listed = containers(template)
    if not listed:
        return [Problem(f"{path}.containers", "must have at least one container")]
    problems = [
        Problem(f"{path}.containers[{index}].image", "required field is missing")
        for index, container in enumerate(listed)
        if not container.get("image")
    ]
    if kind.requires_default_container and not any(
        c.get("name") == kind.default_container for c in listed
    ):
        message = (
            f'no container named "{kind.default_container}": {kind.kind} runs the training '
            f'process in the container named "{kind.default_container}"'
        )
        problems.append(Problem(f"{path}.containers", message))
    return problems


def _check_managed_by(managed_by: str | None) -> list[Problem]:
    if managed_by is None or managed_by in MANAGED_BY_VALUES:
        return []
    expected = ", ".join(MANAGED_BY_VALUES)
    message = f"expected one of {expected}, got {describe(managed_by)}"
    return [Problem("spec.runPolicy.managedBy", message)]


# --- prepare -------------------------------------------------------------------------------------


def prepare(
    job_or_source: Source, *, registry: KindLookup | None = None
) -> tuple[Kind, TrainingJob]:
    """Load, default and validate exactly one job; raise InvalidJobError listing every problem."""
    return exactly_one(prepare_all(job_or_source, registry=registry), job_or_source)


def prepare_all(
    source: Source, *, registry: KindLookup | None = None
) -> list[tuple[Kind, TrainingJob]]:
    """`prepare` for every job of a source (a multi-document file); all problems at once."""
    lookup = registry or default_registry()
    if isinstance(source, TrainingJob):
        docs = [Document(model_data(source), "")]  # re-checked: a model built in code may be wrong
    else:
        docs = read_documents(source)
    prepared: list[tuple[Kind, TrainingJob]] = []
    errors: list[InvalidJobError] = []
    for doc in docs:
        try:
            prepared.append(prepare_document(doc, lookup))
        except InvalidJobError as err:
            errors.append(err)
    raise_all(errors)
    return prepared


def prepare_document(doc: Document, registry: KindLookup | None = None) -> tuple[Kind, TrainingJob]:
    """`prepare` for one document; its errors carry the document's source."""
    registry = registry or default_registry()
    try:
        job = parse_document(doc, registry)
    except InvalidJobError as err:
        # The model could not be built; still report the name rules, which need only raw data.
        reported = {p.path for p in err.problems}
        extra = [p for p in _raw_metadata_problems(doc.data) if p.path not in reported]
        raise InvalidJobError(err.problems + extra, source=err.source, job=err.job) from None
    kind = registry.get(job.kind)
    defaulted = apply_defaults(job, kind)
    problems = validate_job(defaulted, kind)
    if problems:
        raise InvalidJobError(problems, source=doc.source, job=job_label(doc.data))
    return kind, defaulted


def _raw_metadata_problems(data: Any) -> list[Problem]:
    meta = data.get("metadata") if isinstance(data, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(data.get("kind"), str):
        return []
    return check_metadata(meta.get("name"), meta.get("namespace"))
