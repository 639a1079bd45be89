"""A study: one `tune_job` search as Ray Tune stores it, read back for a person (`trainop ui`).

`tune_job` names its Ray Tune experiment `<template name>-<time>` and writes STUDY_FILE in the
experiment's directory under the storage path (Ray Tune's default: ~/ray_results): the objective,
its mode, the template's kind and name, and the search spaces. `list_studies(root)` finds those
directories (reading nothing of Ray's); `read_study(path)` reads one through Ray Tune's own
`ExperimentAnalysis` (so it needs Ray) into the rows `trainop tune` prints, with each trial's
objective per report. Ray Tune's files are the only store: nothing is copied out of them.
Reading a study unpickles what Ray Tune wrote there: read only the storage path you wrote to.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_hpo.results import TrialSummary, best_of, summarize

STUDY_FILE = "trainop-study.json"
MAX_STUDY_FILE_BYTES = 64 * 1024
MAX_STUDIES = 500  # the newest, when a storage path holds more
MAX_HISTORY_POINTS = 500  # per trial: a long trial's curve is thinned evenly
# Ray Tune's trial statuses, as a person reads them while the study runs.
_LIVE = {"PENDING": "Pending", "RUNNING": "Running", "PAUSED": "Paused"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,199}")


@dataclass(frozen=True)
class StudyInfo:
    """What STUDY_FILE says about one study, and where it is."""

    name: str  # the experiment directory's name, unique under its storage path
    path: Path
    metric: str
    mode: str  # min | max
    kind: str = ""
    template: str = ""
    namespace: str = ""  # of the trials' jobs; "" for the backend's default
    params: dict[str, str] = field(default_factory=dict)  # search spaces, as written
    started: float = 0.0  # seconds since the epoch


@dataclass(frozen=True)
class StudyTrial:
    summary: TrialSummary  # state: Succeeded | Stopped | Failed | Pending | Running | Paused
    job_name: str
    history: list[tuple[int, float]]  # (report number, objective), thinned to a bound


@dataclass(frozen=True)
class Study:
    info: StudyInfo
    trials: list[StudyTrial]


def study_name(template: Mapping[str, Any], when: float | None = None) -> str:
    """`<template name>-<YYYY-mm-dd_HH-MM-SS>`: the experiment's name. Pure given `when`."""
    base = str((template.get("metadata") or {}).get("name") or "trial")
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(when))
    return (re.sub(r"[^A-Za-z0-9_]+", "-", base)[:60].strip("-") or "trial") + "-" + stamp


def write_study_file(
    directory: Path,
    metric: str,
    mode: str,
    template: Mapping[str, Any],
    space: Mapping[str, Any],
    namespace: str | None = None,
) -> None:
    """Describe the study in `directory` (made if missing), before Ray Tune writes there."""
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "metric": metric,
        "mode": mode,
        "kind": str(template.get("kind", "")),
        "template": str((template.get("metadata") or {}).get("name", "")),
        "namespace": namespace or "",
        "params": {name: str(spec) for name, spec in space.items()},
        "started": time.time(),
    }
    (directory / STUDY_FILE).write_text(json.dumps(record, indent=2) + "\n")


def list_studies(root: Path) -> list[StudyInfo]:
    """The studies under `root`, newest first (at most MAX_STUDIES); a directory without a
    readable STUDY_FILE (another Ray Tune experiment, or a damaged one) is not a study."""
    try:
        entries = [entry for entry in root.iterdir() if _NAME.fullmatch(entry.name)]
    except OSError:
        return []
    studies = [info for entry in entries if (info := study_info(entry)) is not None]
    return sorted(studies, key=lambda info: info.started, reverse=True)[:MAX_STUDIES]


def find_study(root: Path, name: str) -> StudyInfo | None:
    """The study directly under `root` named `name`; None for any other name (no path)."""
    if not _NAME.fullmatch(name):
        return None
    return study_info(root / name)


def study_info(directory: Path) -> StudyInfo | None:
    try:
        with (directory / STUDY_FILE).open("rb") as handle:
            data = json.loads(handle.read(MAX_STUDY_FILE_BYTES + 1)[:MAX_STUDY_FILE_BYTES])
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("metric"), str):
        return None
    params = data.get("params") if isinstance(data.get("params"), dict) else {}
    started = data.get("started")
    return StudyInfo(
        name=directory.name,
        path=directory,
        metric=data["metric"],
        mode="max" if data.get("mode") == "max" else "min",
        kind=str(data.get("kind", "")),
        template=str(data.get("template", "")),
        namespace=str(data.get("namespace", "")),
        params={str(k): str(v) for k, v in (params or {}).items()},
        started=float(started) if isinstance(started, int | float) else 0.0,
    )


def read_study(info: StudyInfo) -> Study:
    """The study's trials as Ray Tune has stored them so far (none before its first save)."""
    from ray.tune import ExperimentAnalysis, ResultGrid

    try:
        analysis = ExperimentAnalysis(str(info.path))
    except (FileNotFoundError, ValueError, RuntimeError):  # no experiment state saved yet
        return Study(info, [])
    grid = ResultGrid(analysis)
    frames = analysis.trial_dataframes
    rows = summarize(grid, info.metric, info.mode)
    rows = [_live(row, trial.status) for row, trial in zip(rows, analysis.trials, strict=True)]
    best = best_of(rows, info.mode)
    trials = []
    for row, trial in zip(rows, analysis.trials, strict=True):
        history = _history(frames.get(trial.trial_id), info.metric)
        marked = TrialSummary(row.trial_id, row.params, row.metric, row.state, row is best,
                              row.reason)  # fmt: skip
        job = str((trial.last_result or {}).get("job_name", ""))
        trials.append(StudyTrial(marked, job, history))
    return Study(info, sorted(trials, key=lambda trial: trial.summary.trial_id))


def _live(row: TrialSummary, status: str) -> TrialSummary:
    """A trial Ray Tune still runs (or has yet to start) is not Stopped: say so."""
    state = _LIVE.get(str(status))
    if state is None:
        return row
    return TrialSummary(row.trial_id, row.params, row.metric, state, False, row.reason)


def _history(frame: Any, metric: str) -> list[tuple[int, float]]:
    if frame is None or metric not in getattr(frame, "columns", ()):
        return []
    values = [float(v) for v in frame[metric].tolist() if _finite(v)]
    points = list(enumerate(values, start=1))
    step = max(1, math.ceil(len(points) / MAX_HISTORY_POINTS))
    return points[::step] if step > 1 else points


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
