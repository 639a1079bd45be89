"""The metrics contract between training scripts and the tools that watch them.

A replica reports metrics by printing `name=value` pairs, Katib's StdOut/TEXT format: one or more
pairs per line, names of word characters, `|` or `-`, values signed floats with an optional
exponent, spaces allowed around `=`. A line may begin with an RFC 3339 timestamp, and the reserved
names `step` and `timestamp` say when rather than what. Two more reserved names carry Kubeflow
Trainer's progress (`status.trainerStatus`, trainer.kubeflow.org/v1alpha1): `progressPercentage`
(0-100, whole percent) and `estimatedRemainingSeconds` (>= 0). The KFP component, the Flyte
outputs, the trial runner and every backend's progress (`trainop_core.progress`) read lines with
`parse_metrics`, the one parser; scripts print them with `report`.

Hostile output is data: a line is parsed in time linear in its length and only up to
`MAX_LINE_CHARS`; a value that is not a finite number (`nan`, `inf`, `1e999`), a progress outside
its range or a name longer than Trainer allows is left out and said in the record's `dropped`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TextIO

PROGRESS = "progressPercentage"
REMAINING = "estimatedRemainingSeconds"
MAX_LINE_CHARS = 8192  # longer lines are not parsed (a printed tensor, a progress bar's redraws)
MAX_NAME_CHARS = 64  # Trainer's Metric.name MaxLength
MAX_REMAINING_SECONDS = 2**31 - 1  # Trainer's int32
MAX_STEP = 2**63 - 1

# Linear in the line, not quadratic: the lookbehind anchors a name at the start of its run of
# name characters (a long run without `=` is scanned once, not once per position), and a number's
# digits can be split only one way (`\d+\.?\d*` backtracks through every split of a long run).
_PAIR = re.compile(
    r"(?<![\w|-])([\w|-]+)\s*=\s*"
    r"([+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|nan|inf(?:inity)?))(?![\w.])",
    re.IGNORECASE,
)
_LEADING_TIME = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s"
)
_RESERVED = ("step", "timestamp", PROGRESS, REMAINING)
# Why a pair or line was left out: the label a count is kept under.
NOT_FINITE = "not-finite"
OUT_OF_RANGE = "out-of-range"
NAME_TOO_LONG = "name-too-long"
LINE_TOO_LONG = "line-too-long"


@dataclass(frozen=True)
class Dropped:
    """A pair (or line) of metric output that was left out: why (`reason`, a short label for
    counting) and what (`detail`, for a person)."""

    reason: str
    detail: str


@dataclass(frozen=True)
class MetricRecord:
    """The metrics of one printed line, with its step and timestamp when the line gave them,
    Trainer's progress fields when it carried them, and what was left out of it."""

    values: dict[str, float] = field(default_factory=dict)
    step: int | None = None
    timestamp: datetime | None = None
    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    dropped: tuple[Dropped, ...] = ()

    def progress(self) -> dict[str, int]:
        """Trainer's progress fields the line carried, by their names (`progressPercentage`,
        `estimatedRemainingSeconds`): what integrations add to a line's metrics."""
        fields = {PROGRESS: self.progress_percentage, REMAINING: self.estimated_remaining_seconds}
        return {name: value for name, value in fields.items() if value is not None}


def parse_metrics(line: str) -> MetricRecord | None:
    """What one line reports, or None when it reports nothing (and drops nothing). Pure; time
    linear in the line, which is only read up to MAX_LINE_CHARS."""
    if len(line) > MAX_LINE_CHARS:
        if "=" not in line:
            return None
        detail = f"a line of {len(line)} characters (at most {MAX_LINE_CHARS} are read)"
        return MetricRecord(dropped=(Dropped(LINE_TOO_LONG, detail),))
    parsed = _Line(_leading_timestamp(line))
    for name, raw in _PAIR.findall(line):
        parsed.take(name, raw)
    return parsed.record()


class _Line:
    """The pairs of one line as they are read (the last of a repeated name wins)."""

    def __init__(self, timestamp: datetime | None) -> None:
        self.values: dict[str, float] = {}
        self.timestamp = timestamp
        self.step: int | None = None
        self.progress: int | None = None
        self.remaining: int | None = None
        self.dropped: list[Dropped] = []

    def take(self, name: str, raw: str) -> None:
        value = float(raw)
        if len(name) > MAX_NAME_CHARS:
            self._drop(NAME_TOO_LONG, f"{name[:MAX_NAME_CHARS]}...: at most {MAX_NAME_CHARS}")
        elif not math.isfinite(value):
            self._drop(NOT_FINITE, f"{name}={raw}: not a finite number")
        elif name == PROGRESS:
            self.progress = self._within(name, value, 100)
        elif name == REMAINING:
            self.remaining = self._within(name, value, MAX_REMAINING_SECONDS)
        elif name == "step":
            self.step = self._whole(name, value)
        elif name == "timestamp":
            self.timestamp = self._time(value) or self.timestamp
        else:
            self.values[name] = value

    def _within(self, name: str, value: float, top: int) -> int | None:
        if 0 <= value <= top:
            return math.floor(value)  # whole units: 99.9 percent is not yet 100
        self._drop(OUT_OF_RANGE, f"{name}={value:g}: expected 0 to {top}")
        return None

    def _whole(self, name: str, value: float) -> int | None:
        if abs(value) <= MAX_STEP:
            return int(value)
        self._drop(OUT_OF_RANGE, f"{name}={value:g}: too large")
        return None

    def _time(self, value: float) -> datetime | None:
        try:
            return datetime.fromtimestamp(value, timezone.utc).astimezone()
        except (OverflowError, OSError, ValueError):
            self._drop(OUT_OF_RANGE, f"timestamp={value:g}: not a time")
            return None

    def _drop(self, reason: str, detail: str) -> None:
        self.dropped.append(Dropped(reason, detail))

    def record(self) -> MetricRecord | None:
        if not (self.values or self.dropped) and self.progress is None and self.remaining is None:
            return None
        return MetricRecord(
            values=self.values,
            step=self.step,
            timestamp=self.timestamp,
            progress_percentage=self.progress,
            estimated_remaining_seconds=self.remaining,
            dropped=tuple(self.dropped),
        )


def collect_metrics(lines: Iterable[str]) -> dict[str, float]:
    """The last reported value of every metric over many lines."""
    latest: dict[str, float] = {}
    for line in lines:
        record = parse_metrics(line)
        if record is not None:
            latest.update(record.values)
    return latest


def collect_progress(lines: Iterable[str]) -> dict[str, int]:
    """The last reported progress fields (`progressPercentage`, `estimatedRemainingSeconds`)
    over many lines; empty when none was reported."""
    latest: dict[str, int] = {}
    for line in lines:
        record = parse_metrics(line)
        if record is not None:
            latest.update(record.progress())
    return latest


def report(
    *,
    step: int | None = None,
    progress_percent: float | None = None,
    estimated_remaining_seconds: float | None = None,
    file: TextIO | None = None,
    **metrics: float,
) -> None:
    """Print metrics in the contract's format, e.g. `report(loss=0.12, accuracy=0.97, step=3)`;
    `progress_percent` (0-100) and `estimated_remaining_seconds` are Trainer's progress (the
    names of Kubeflow's `update_trainjob_status`), printed as `progressPercentage=45`."""
    for name in metrics:
        if not re.fullmatch(r"[\w|-]{1,64}", name) or name in _RESERVED:
            raise ValueError(f"metric name {name!r}: expected 1-64 word characters, '|' or '-'")
    pairs = [f"{name}={float(value):.6g}" for name, value in metrics.items()]
    if progress_percent is not None:
        pairs.append(f"{PROGRESS}={_bounded(progress_percent, 100, 'progress_percent')}")
    if estimated_remaining_seconds is not None:
        seconds = _bounded(
            estimated_remaining_seconds, MAX_REMAINING_SECONDS, "estimated_remaining_seconds"
        )
        pairs.append(f"{REMAINING}={seconds}")
    if step is not None:
        pairs.append(f"step={int(step)}")
    print(" ".join(pairs), file=file or sys.stdout, flush=True)


def _bounded(value: float, top: int, what: str) -> int:
    if not 0 <= float(value) <= top:  # also false for nan
        raise ValueError(f"{what}={value!r}: expected a number from 0 to {top}")
    return math.floor(value)


def _leading_timestamp(line: str) -> datetime | None:
    match = _LEADING_TIME.match(line)
    if match is None:
        return None
    try:
        return datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
    except ValueError:  # 2026-13-45T...: shaped like a time, not one
        return None
