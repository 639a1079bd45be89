"""A command job's outputs: its final state and the primary replica's metrics.

Declared outputs are read by name: `state` (str) is the job's final state, `metrics`
(dict[str, float]) every metric the primary replica reported, any other name (float) the metric of
that name (trainop_core.report's `name=value` contract).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.type_engine import TypeEngine
from flytekit.models.literals import LiteralMap
from flytekit.models.task import TaskTemplate

from trainop_core.report import collect_metrics


class Role(str, Enum):
    STATE = "state"
    METRICS = "metrics"
    METRIC = "metric"


PYTHON_TYPES: dict[Role, Any] = {
    Role.STATE: str,
    Role.METRICS: dict[str, float],
    Role.METRIC: float,
}


def role_of(name: str) -> Role:
    if name == Role.STATE.value:
        return Role.STATE
    return Role.METRICS if name == Role.METRICS.value else Role.METRIC


def roles(template: TaskTemplate) -> dict[str, str]:
    """Output name -> role for a command task (function tasks write their own outputs: {})."""
    if template.container is not None or template.interface is None:
        return {}
    return {name: role_of(name).value for name in template.interface.outputs}


class MissingMetricError(LookupError):
    """A declared metric output that the primary replica never reported."""


def values(state: str, lines: list[str], declared: dict[str, str]) -> dict[str, Any]:
    """The Python value of every declared output. Raises MissingMetricError."""
    metrics = collect_metrics(lines)
    out: dict[str, Any] = {}
    for name, role in declared.items():
        if role == Role.STATE.value:
            out[name] = state
        elif role == Role.METRICS.value:
            out[name] = metrics
        elif name in metrics:
            out[name] = metrics[name]
        else:
            reported = ", ".join(sorted(metrics)) or "none"
            raise MissingMetricError(f"metric {name!r} was not reported (reported: {reported})")
    return out


def literal_map(outputs: dict[str, Any], declared: dict[str, str]) -> LiteralMap:
    """The outputs as Flyte literals, typed by their roles."""
    hints = {name: PYTHON_TYPES[Role(role)] for name, role in declared.items()}
    ctx = FlyteContextManager.current_context()
    return TypeEngine.dict_to_literal_map(ctx, outputs, type_hints=hints)
