"""The metrics contract between training scripts and the tools that watch them.

A replica reports metrics by printing `name=value` pairs, Katib's StdOut/TEXT format: one or more
pairs per line, names of word characters, `|` or `-`, values signed floats with an optional
exponent, spaces allowed around `=`. A line may begin with an RFC 3339 timestamp, and the reserved
names `step` and `timestamp` say when rather than what. Both the KFP component and the trial runner
read metrics with `parse_metrics`; scripts print them with `report`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO

# A name starts where no name character precedes it: without that lookbehind every position of a
# long word would be tried as a name's start, and a line of n word characters cost n^2 steps (a
# 1 KiB line 20 ms, a 256 KiB one minutes). The matches are the same either way.
_PAIR = re.compile(
    r"(?<![\w|-])([\w|-]+)\s*=\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w.])"
)
_LEADING_TIME = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))\s"
)
_RESERVED = ("step", "timestamp")


@dataclass(frozen=True)
class MetricRecord:
    """The metrics of one printed line, with its step and timestamp when the line gave them."""

    values: dict[str, float] = field(default_factory=dict)
    step: int | None = None
    timestamp: datetime | None = None


def parse_metrics(line: str) -> MetricRecord | None:
    """The metrics on one line, or None when it carries none. Pure."""
    timestamp = _leading_timestamp(line)
    values: dict[str, float] = {}
    step: int | None = None
    for name, raw in _PAIR.findall(line):
        value = float(raw)
        if name == "step":
            step = int(value)
        elif name == "timestamp":
            timestamp = datetime.fromtimestamp(value).astimezone()
        elif math.isfinite(value):
            values[name] = value
    if not values:
        return None
    return MetricRecord(values=values, step=step, timestamp=timestamp)


def collect_metrics(lines: Iterable[str]) -> dict[str, float]:
    """The last reported value of every metric over many lines."""
    latest: dict[str, float] = {}
    for line in lines:
        record = parse_metrics(line)
        if record is not None:
            latest.update(record.values)
    return latest


def report(*, step: int | None = None, file: TextIO | None = None, **metrics: float) -> None:
    """Print metrics in the contract's format, e.g. `report(loss=0.12, accuracy=0.97, step=3)`."""
    for name in metrics:
        if not re.fullmatch(r"[\w|-]+", name) or name in _RESERVED:
            raise ValueError(f"metric name {name!r}: expected word characters, '|' or '-'")
    pairs = [f"{name}={float(value):.6g}" for name, value in metrics.items()]
    if step is not None:
        pairs.append(f"step={int(step)}")
    print(" ".join(pairs), file=file or sys.stdout, flush=True)


def _leading_timestamp(line: str) -> datetime | None:
    match = _LEADING_TIME.match(line)
    if match is None:
        return None
    return datetime.fromisoformat(match.group(1).replace("Z", "+00:00"))
