"""How a Ray Tune search (`trainop tune`, `tune_job`) maps onto Katib's algorithm and counts.

Ray Tune enumerates grid parameters and samples the others, `num_samples` times per grid point,
and keeps going when trials fail. Katib's `grid` algorithm enumerates every parameter once, its
`random` algorithm samples every one, and it stops after `maxFailedTrialCount` failures. So:

- only grid parameters (and constants): `grid`, one trial per combination; repeating the grid
  (`num_samples` > 1) cannot be written (Katib refuses more trials than combinations);
- no grid parameter: `random` (or the algorithm asked for), `num_samples` trials;
- both: refused, Katib has no algorithm that enumerates some parameters and samples others.

Every trial may fail before the experiment does (`trainop tune` fails only when all did), unless
`max_failed` says otherwise. ASHA becomes Katib's only early-stopping algorithm, `medianstop`,
which is a different rule (see `ASHA_NOTE`). Errors are `SearchError`s that say what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainop_hpo.space import SpaceError, spec_of

DEFAULT_PARALLEL = 3  # Katib's own default for parallelTrialCount
GRID, RANDOM = "grid", "random"
# ASHA's defaults in Ray Tune: a trial reports at least once (grace period 1) before it may stop.
MEDIANSTOP = {"min_trials_required": "3", "start_step": "1"}
ASHA_NOTE = (
    "ASHA became Katib's medianstop, a different rule: once 3 trials have succeeded, a running "
    "trial stops when its first objective value is worse than the mean of theirs; ASHA instead "
    "keeps the best quarter of the trials at each rung (1, 4, 16, ... reports). medianstop "
    "reads the order of the metric lines from their timestamps, so the script must print lines "
    "starting with an RFC 3339 time (Katib's StdOut collector)"
)
PARALLEL_NOTE = (
    "Ray Tune runs as many trials at once as its CPUs allow; the Experiment runs {n} at once "
    "(set max_concurrent / --max-concurrent to choose)"
)


class SearchError(SpaceError):
    """The search cannot be written as a Katib Experiment; the message says why and what to do."""


@dataclass(frozen=True)
class KatibSearch:
    """What the Experiment's spec says about the search, and how it differs from Ray Tune's."""

    algorithm: str
    max_trials: int
    parallel: int
    max_failed: int
    early_stopping: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def katib_search(
    param_space: Mapping[str, Any],
    *,
    num_samples: int = 1,
    max_concurrent: int | None = None,
    scheduler: str | None = None,
    algorithm: str | None = None,
    max_failed: int | None = None,
) -> KatibSearch:
    """The Katib equivalent of a Ray Tune search over `param_space`; SearchError if none. Pure."""
    if num_samples < 1:
        raise SearchError(f"num_samples must be at least 1, got {num_samples}")
    grid, sampled = _classify(param_space)
    chosen, trials = _algorithm(grid, sampled, num_samples, algorithm)
    notes: list[str] = []
    if max_concurrent is None:
        parallel = min(DEFAULT_PARALLEL, trials)
        notes.append(PARALLEL_NOTE.format(n=parallel))
    elif max_concurrent < 1:
        raise SearchError(f"max_concurrent must be at least 1, got {max_concurrent}")
    else:
        parallel = min(max_concurrent, trials)  # Katib: parallelTrialCount <= maxTrialCount
    if max_failed is not None and not 0 <= max_failed <= trials:
        raise SearchError(f"max_failed must be between 0 and the {trials} trials, got {max_failed}")
    stopping = _early_stopping(scheduler)
    if stopping is not None:
        notes.append(ASHA_NOTE)
    failed = trials if max_failed is None else max_failed
    return KatibSearch(chosen, trials, parallel, failed, stopping, notes)


def _classify(param_space: Mapping[str, Any]) -> tuple[dict[str, int], list[str]]:
    """Grid parameters with their sizes, and the names of sampled ones (constants are neither)."""
    grid: dict[str, int] = {}
    sampled: list[str] = []
    for name, value in param_space.items():
        spec = spec_of(name, value)
        if spec is not None and spec.kind == GRID:
            grid[name] = len(spec.values)
        elif isinstance(value, Mapping) and "grid_search" in value:
            grid[name] = len(list(value["grid_search"]))
        elif spec is not None or type(value).__module__.startswith("ray."):
            sampled.append(name)
    return grid, sampled


def _algorithm(
    grid: dict[str, int], sampled: list[str], num_samples: int, asked: str | None
) -> tuple[str, int]:
    if grid and sampled:
        raise SearchError(
            f"Katib cannot enumerate grid parameters ({', '.join(grid)}) and sample others "
            f"({', '.join(sampled)}) in one Experiment: make them all grid or all sampled"
        )
    if grid:
        combinations = math.prod(grid.values())
        if num_samples > 1:
            raise SearchError(
                f"Katib's grid algorithm runs each of the {combinations} combinations once; "
                f"Ray Tune would run each {num_samples} times (samples): export with 1 sample"
            )
        if asked not in (None, GRID):
            raise SearchError(f"algorithm {asked!r}: a search of grid parameters is Katib's grid")
        return GRID, combinations
    if asked == GRID:
        raise SearchError("algorithm 'grid' needs grid parameters (grid:A,B or tune.grid_search)")
    return asked or RANDOM, num_samples


def _early_stopping(scheduler: str | None) -> dict[str, Any] | None:
    if scheduler in (None, "fifo"):
        return None
    if scheduler == "asha":  # ASHA with Ray Tune's defaults, as tune_job(scheduler="asha") runs it
        settings = [{"name": key, "value": value} for key, value in MEDIANSTOP.items()]
        return {"algorithmName": "medianstop", "algorithmSettings": settings}
    raise SearchError(
        f"scheduler {scheduler!r}: expected None, 'fifo' or 'asha' (Katib's only early stopping, "
        "medianstop, is the nearest to ASHA)"
    )
