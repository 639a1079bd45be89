"""A Ray Tune ResultGrid read back as one row per trial: parameters, metric, state, best.

A trial's state is Succeeded (its job ran to the end), Stopped (a scheduler or the time budget
ended it early) or Failed (its job failed, or it errored); the best trial is chosen among the
trials that did not fail, on the last reported value of the metric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainop_hpo.runner import FAILED, STOPPED, SUCCEEDED

_EXCEPTION_PREFIX = re.compile(r"^(?:\w+\.)+\w+: ")
STATE_KEY = "trial_state"  # what trainop_hpo.tune reports, with the final metrics, on success


@dataclass(frozen=True)
class TrialSummary:
    trial_id: str
    params: dict[str, Any]
    metric: float | None  # the last reported value
    state: str  # Succeeded | Stopped | Failed
    best: bool = False
    reason: str = ""


def summarize(results: Any, metric: str, mode: str) -> list[TrialSummary]:
    """One summary per Ray Tune `Result` of `results` (a ResultGrid, or any iterable of Results),
    the best one marked."""
    rows = [_summary(result, metric) for result in results]
    best = best_of(rows, mode)
    return [_marked(row, row is best) for row in rows]


def best_of(rows: list[TrialSummary], mode: str) -> TrialSummary | None:
    """The trial with the lowest (mode "min") or highest last metric among those that did not
    fail; None if there is none."""
    scored = [row for row in rows if row.state != FAILED and row.metric is not None]
    if not scored:
        return None
    sign = 1.0 if mode == "min" else -1.0
    return min(scored, key=lambda row: sign * float(row.metric or 0.0))


def _summary(result: Any, metric: str) -> TrialSummary:
    metrics: Mapping[str, Any] = result.metrics or {}
    value = metrics.get(metric)
    params = dict(result.config or {})
    trial_id = str(metrics.get("trial_id") or _trial_id_from_path(result))
    if result.error is not None:
        return TrialSummary(trial_id, params, _number(value), FAILED, reason=_reason(result.error))
    state = SUCCEEDED if metrics.get(STATE_KEY) == SUCCEEDED else STOPPED
    return TrialSummary(trial_id, params, _number(value), state)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _reason(error: BaseException) -> str:
    # Ray wraps the trial's exception; its own "module.Class: message" is the last line.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return _EXCEPTION_PREFIX.sub("", lines[-1]) if lines else type(error).__name__


def _trial_id_from_path(result: Any) -> str:
    path = str(getattr(result, "path", "") or "")
    return path.rstrip("/").rsplit("/", 1)[-1] or "?"


def _marked(row: TrialSummary, best: bool) -> TrialSummary:
    if not best:
        return row
    return TrialSummary(row.trial_id, row.params, row.metric, row.state, True, row.reason)
