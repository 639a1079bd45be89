"""Kubernetes label selectors (`matchLabels` + `matchExpressions`), checked and matched.

The same semantics as `metav1.LabelSelector`: every requirement must hold; `In`/`NotIn` need
values, `Exists`/`DoesNotExist` none; an empty selector matches everything. Outside Kubernetes a
namespace is only a name, so its labels are the one Kubernetes sets on every namespace:
`kubernetes.io/metadata.name`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop_core.api.types import LabelSelector
from trainop_core.errors import Problem

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def namespace_labels(namespace: str) -> dict[str, str]:
    """The labels of a namespace where namespaces have no others (local, Ray, render)."""
    return {NAMESPACE_NAME_LABEL: namespace}


def selector_problems(selector: LabelSelector | None, path: str) -> list[Problem]:
    """What is wrong with each requirement of `selector` (field paths under `path`)."""
    if selector is None:
        return []
    problems = []
    for i, requirement in enumerate(selector.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        problems += _requirement_problems(requirement, where)
    return problems


def _requirement_problems(requirement: Mapping[str, Any], where: str) -> list[Problem]:
    unknown = set(requirement) - {"key", "operator", "values"}
    if unknown:
        return [Problem(f"{where}.{sorted(unknown)[0]}", "unknown field")]
    if not isinstance(requirement.get("key"), str) or not requirement["key"]:
        return [Problem(f"{where}.key", "required field is missing")]
    operator, values = requirement.get("operator"), requirement.get("values")
    if operator not in OPERATORS:
        return [Problem(f"{where}.operator", f"expected one of {', '.join(OPERATORS)}")]
    if values is not None and not (
        isinstance(values, list) and all(isinstance(v, str) for v in values)
    ):
        return [Problem(f"{where}.values", "expected a list of strings")]
    if operator in ("In", "NotIn") and not values:
        return [Problem(f"{where}.values", f"must be non-empty for operator {operator}")]
    if operator in ("Exists", "DoesNotExist") and values:
        return [Problem(f"{where}.values", f"must be empty for operator {operator}")]
    return []


def matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Does `labels` satisfy `selector` (None or empty: yes)? `selector` must be checked."""
    if selector is None:
        return True
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    return all(_holds(r, labels) for r in selector.match_expressions or [])


def _holds(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = requirement["key"], requirement["operator"]
    values = requirement.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    return key not in labels
