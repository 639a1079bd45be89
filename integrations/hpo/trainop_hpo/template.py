"""Job templates: any kind of job with `${trialParameters.NAME}`, turned into one job per trial.

A template is read as plain data (its placeholders may sit where the job model expects other
text), then each trial's job is the template with exact substitution (trainop_core.templating)
and a name of its own: the template's name plus a short trial id, kept a valid DNS-1035 label
short enough for the pods the core derives from it (`<job>-<replica type>-<index>`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainop_core.api.load import default_registry, exactly_one, read_documents
from trainop_core.api.validation import MAX_NAME
from trainop_core.errors import InvalidJobError, Problem
from trainop_core.kinds.base import Kind
from trainop_core.templating import placeholders, substitute

TemplateSource = str | Path | Mapping[str, Any]
DEFAULT_NAME = "trial"
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def read_template(source: TemplateSource) -> dict[str, Any]:
    """The one job document of a file, YAML/JSON text or mapping, placeholders intact (a copy).

    Raises InvalidJobError if it is not exactly one mapping or uses no placeholder at all.
    """
    docs = read_documents(source if not isinstance(source, Mapping) else dict(source))
    doc = exactly_one(docs, source if not isinstance(source, Mapping) else "")
    if not isinstance(doc.data, Mapping):
        raise InvalidJobError([Problem("", "expected a job mapping")], source=doc.source)
    template = copy.deepcopy(dict(doc.data))
    if not placeholders(template):
        problem = Problem("", "uses no ${trialParameters.NAME} placeholder: nothing to tune")
        raise InvalidJobError([problem], source=doc.source)
    return template


def check_parameters(template: Mapping[str, Any], names: Iterable[str]) -> None:
    """Raise InvalidJobError unless `names` are exactly the template's placeholders. Pure."""
    substitute(template, dict.fromkeys(names, "0"))


def template_dir(source: TemplateSource) -> Path | None:
    """The directory a template file's relative paths resolve in; None for text or a mapping."""
    if isinstance(source, Path):
        return source.resolve().parent
    if isinstance(source, str) and "\n" not in source and Path(source).is_file():
        return Path(source).resolve().parent
    return None


def template_kind(template: Mapping[str, Any]) -> Kind:
    """The template's kind as the core's registry knows it (aliases accepted)."""
    name = template.get("kind")
    try:
        return default_registry().get(str(name))
    except LookupError as err:
        raise InvalidJobError([Problem("kind", str(err.args[0]))]) from None


def trial_job(
    template: Mapping[str, Any], params: Mapping[str, Any], trial_id: str
) -> dict[str, Any]:
    """The template with `params` substituted and named for `trial_id`. Pure.

    Raises InvalidJobError for a missing or unused parameter (exact substitution).
    """
    job: dict[str, Any] = substitute(template, params)
    metadata = job.setdefault("metadata", {})
    metadata["name"] = trial_name(template, trial_id)
    return job


def trial_name(template: Mapping[str, Any], trial_id: str) -> str:
    """`<template name>-<trial id>`, the template name shortened so that the longest pod name
    (`<job>-<replica type>-<index>`) stays within the core's limit. Pure."""
    suffix = "-" + _label(trial_id)
    room = MAX_NAME - len(suffix) - _longest_pod_suffix(template)
    base = _label(str((template.get("metadata") or {}).get("name") or DEFAULT_NAME))
    base = base[: max(room, 1)].rstrip("-") or DEFAULT_NAME[: max(room, 1)]
    if not base[0].isalpha():
        base = "t" + base[: max(room - 1, 0)]
    return base + suffix


def _label(text: str) -> str:
    return _NOT_LABEL.sub("-", text.lower()).strip("-")


def _longest_pod_suffix(template: Mapping[str, Any]) -> int:
    """len("-<replica type>-<highest index>") of the template's replicas (0 if unreadable)."""
    try:
        field = template_kind(template).replica_field
    except InvalidJobError:
        return 0
    specs = (template.get("spec") or {}).get(field) or {}
    lengths = [
        len(f"-{rtype.lower()}-{max(_replicas(spec) - 1, 0)}") for rtype, spec in specs.items()
    ]
    return max(lengths, default=0)


def _replicas(spec: Any) -> int:
    count = spec.get("replicas", 1) if isinstance(spec, Mapping) else 1
    return count if isinstance(count, int) else 1
