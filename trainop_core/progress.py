"""Training progress as Kubeflow Trainer defines it (`status.trainerStatus`), the same on every
backend, folded from what the job's primary replica prints.

A replica reports progress with the metric lines every trainop tool reads (`trainop_core.report`:
`progressPercentage=45 estimatedRemainingSeconds=120 loss=0.23`). Each backend follows the
primary replica's output (local: its log file; Ray: the chunks its actor sends; Kubernetes: the
pod's log through the API, `operator/progress.py`), feeds it to a `JobProgress`, and stores what
it writes: a TrainJob's `status.trainerStatus` (Trainer's own field and schema), a v1 job's
annotation `trainop.dev/trainer-status` (the same object as JSON; the v1 CRDs prune unknown status
fields, and an annotation is what upstream's clients, kubectl and the `kubeflow-training` SDK
leave alone). Inside trainop every job model carries it in that annotation.

Bounded whatever a replica prints: lines wait in a queue of `MAX_PENDING_LINES` (older ones are
dropped as a flood, the newest kept), at most `MAX_METRICS` metric names are kept, and a job's
progress is written at most once every `WRITE_INTERVAL` seconds (once more when the replica
ends), only when it changed (unchanged facts reported again refresh `lastUpdatedTime` once a
`HEARTBEAT_SECONDS`). What is left out is counted by reason (`JobProgress.dropped`). A job that
prints none of it has no progress: nothing is made up.
"""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeGuard

from trainop_core.report import (
    MAX_LINE_CHARS,
    MAX_NAME_CHARS,
    MAX_REMAINING_SECONDS,
    PROGRESS,
    REMAINING,
    Dropped,
    MetricRecord,
    parse_metrics,
)

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob

ANNOTATION = "trainop.dev/trainer-status"
WRITE_INTERVAL = 5.0  # seconds: the Kubeflow SDK's own throttle of update_trainjob_status
HEARTBEAT_SECONDS = 60.0
MAX_METRICS = 64  # Trainer allows 256; a training loop reports a handful
MAX_VALUE_CHARS = 64  # Trainer's Metric.value MaxLength
MAX_WIRE_METRICS = 256  # Trainer's TrainerStatus.metrics MaxItems
MAX_PENDING_LINES = 256
MAX_ANNOTATION_CHARS = 64 * 1024
FLOOD = "flood"
TOO_MANY_METRICS = "too-many-metrics"
Clock = Callable[[], float]


@dataclass(frozen=True)
class TrainerStatus:
    """trainer.kubeflow.org/v1alpha1 TrainerStatus: whole percent, seconds left, the newest value
    of each metric (as text, Trainer's type), and when they were observed."""

    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    last_updated_time: datetime | None = None

    def facts(self) -> tuple[Any, ...]:
        """What a write is about: everything but the time."""
        return (self.progress_percentage, self.estimated_remaining_seconds, self.metrics)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        if self.progress_percentage is not None:
            wire[PROGRESS] = self.progress_percentage
        if self.estimated_remaining_seconds is not None:
            wire[REMAINING] = self.estimated_remaining_seconds
        if self.metrics:
            wire["metrics"] = [{"name": n, "value": v} for n, v in self.metrics]
        if self.last_updated_time is not None:
            wire["lastUpdatedTime"] = _rfc3339(self.last_updated_time)
        return wire

    def to_patch(self) -> dict[str, Any]:
        """A JSON merge patch that makes a stored TrainerStatus this one (absent fields null)."""
        wire: dict[str, Any] = {PROGRESS: None, REMAINING: None, "metrics": None}
        return {**wire, **self.to_wire()}

    @classmethod
    def from_wire(cls, data: Any) -> TrainerStatus | None:
        """A stored TrainerStatus (anyone may have written it: whatever does not fit Trainer's
        schema is left out); None if `data` is not one."""
        if not isinstance(data, Mapping):
            return None
        return cls(
            progress_percentage=_bounded_int(data.get(PROGRESS), 100),
            estimated_remaining_seconds=_bounded_int(data.get(REMAINING), MAX_REMAINING_SECONDS),
            metrics=_wire_metrics(data.get("metrics")),
            last_updated_time=_time(data.get("lastUpdatedTime")),
        )

    def values(self) -> dict[str, float]:
        """Every metric that reads as a number, and the progress fields, by name: what the
        integrations report (KFP's metrics artifact, Tune's results)."""
        out: dict[str, float] = {}
        for name, text in self.metrics:
            try:
                out[name] = float(text)
            except ValueError:
                continue
        if self.progress_percentage is not None:
            out[PROGRESS] = self.progress_percentage
        if self.estimated_remaining_seconds is not None:
            out[REMAINING] = self.estimated_remaining_seconds
        return out

    def summary(self, width: int = 120) -> str:
        """`45% | ETA 2m0s | loss=0.23 acc=0.9`, cut at `width` characters."""
        parts = []
        if self.progress_percentage is not None:
            parts.append(f"{self.progress_percentage}%")
        if self.estimated_remaining_seconds is not None:
            parts.append(f"ETA {duration(self.estimated_remaining_seconds)}")
        if self.metrics:
            parts.append(" ".join(f"{n}={v}" for n, v in self.metrics))
        text = " | ".join(parts)
        return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def duration(seconds: float) -> str:
    """kubectl's short durations: 45s, 3m12s, 2h5m, 4d."""
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s" if whole < 600 else f"{whole // 60}m"
    if whole < 86400:
        return f"{whole // 3600}h{(whole % 3600) // 60}m"
    return f"{whole // 86400}d"


# --- folding a replica's output -------------------------------------------------------------------
class ProgressTracker:
    """The newest progress a replica reported, from its output lines: the last line that said
    where it is (`progressPercentage` and `estimatedRemainingSeconds` together: a field that line
    leaves out is unknown again) and the newest value of each metric, the newest line's first.
    Memory is bounded: lines wait in a queue of `max_pending` until `status()` reads them (older
    ones are dropped as a flood), and the `max_metrics` most recently reported metric names are
    kept. Not thread-safe."""

    def __init__(self, max_metrics: int = MAX_METRICS, max_pending: int = MAX_PENDING_LINES):
        self.max_metrics = max_metrics
        self._pending: deque[tuple[str, datetime | None]] = deque()
        self._max_pending = max_pending
        self._partial = ""
        self._progress: int | None = None
        self._remaining: int | None = None
        self._metrics: dict[str, str] = {}
        self._updated: datetime | None = None
        self.dropped: Counter[str] = Counter()
        self.first_dropped: dict[str, str] = {}  # reason -> the first example, for a person

    def feed(self, line: str, seen: datetime | None = None) -> None:
        """One line of output (no newline), observed at `seen` (default: when it is read)."""
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self._drop(Dropped(FLOOD, f"more than {self._max_pending} lines between two reads"))
        self._pending.append((line, seen))

    def feed_chunk(self, data: str, seen: datetime | None = None) -> None:
        """Output as it comes (any cut): whole lines are fed, the rest waits for its newline.
        A line that never ends is kept only up to the parser's limit."""
        lines = (self._partial + data).split("\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_CHARS:
            self._partial = self._partial[: MAX_LINE_CHARS + 1]  # still too long when it ends
        for line in lines:
            self.feed(line, seen)

    def skipped(self, what: str) -> None:
        """The backend skipped output it could not keep up with (a flood)."""
        self._drop(Dropped(FLOOD, what))

    def status(self) -> TrainerStatus | None:
        """The newest progress, every waiting line read; None while nothing was reported."""
        while self._pending:
            line, seen = self._pending.popleft()
            record = parse_metrics(line)
            if record is not None:
                self._fold(record, seen)
        if self._updated is None:
            return None
        return TrainerStatus(
            self._progress, self._remaining, tuple(self._metrics.items()), self._updated
        )

    def _fold(self, record: MetricRecord, seen: datetime | None) -> None:
        for dropped in record.dropped:
            self._drop(dropped)
        if not record.values and not record.progress():
            return
        if record.progress():  # one report of where it is: a field it leaves out is unknown
            self._progress = record.progress_percentage
            self._remaining = record.estimated_remaining_seconds
        values = dict(record.values)
        if record.step is not None:
            values["step"] = record.step  # where the loop is: a bar shows it
        self._metrics = self._newest_first(values)
        self._updated = record.timestamp or seen or datetime.now(timezone.utc)

    def _newest_first(self, values: Mapping[str, float]) -> dict[str, str]:
        """This line's metrics in its order, then the names older lines reported (their newest
        values), most recent first: Trainer's list is its newest report, and a line may report
        only some names. The `max_metrics` most recent are kept; the rest are counted."""
        fresh = {name: _text(float(value)) for name, value in values.items()}
        older = [(n, v) for n, v in self._metrics.items() if n not in fresh]
        merged = [*fresh.items(), *older]
        for name, _ in merged[self.max_metrics :]:
            self._drop(Dropped(TOO_MANY_METRICS, f"{name}: {self.max_metrics} names kept"))
        return dict(merged[: self.max_metrics])

    def _drop(self, dropped: Dropped) -> None:
        self.dropped[dropped.reason] += 1
        self.first_dropped.setdefault(dropped.reason, dropped.detail)


@dataclass
class WriteGate:
    """When one job's progress may be written: at most once every `interval` seconds, only
    when its facts changed (or, unchanged, newer by `heartbeat`), at once when it is `final`.
    Pure apart from what it remembers; `now` is a monotonic clock's."""

    interval: float = WRITE_INTERVAL
    heartbeat: float = HEARTBEAT_SECONDS
    written: TrainerStatus | None = None
    last: float | None = None

    def wait(self, status: TrainerStatus | None, now: float, final: bool = False) -> float | None:
        """Seconds until `status` may be written (0: now), None if it need not be."""
        if status is None or not self._news(status):
            return None
        if final or self.last is None:
            return 0.0
        return max(0.0, self.last + self.interval - now)

    def wrote(self, status: TrainerStatus, now: float) -> None:
        self.written, self.last = status, now

    def _news(self, status: TrainerStatus) -> bool:
        old = self.written
        if old is None or status.facts() != old.facts():
            return True
        if status.last_updated_time is None or old.last_updated_time is None:
            return False
        age = (status.last_updated_time - old.last_updated_time).total_seconds()
        return age >= self.heartbeat


@dataclass
class JobProgress:
    """One job's progress on a backend: output in (`tracker`), at most one `write` per interval
    out (`flush`). `write` stores a TrainerStatus (it may raise: nothing counts as written then,
    and a later flush tries again); `on_dropped(reason, detail)` hears of the first output left
    out for each reason (later ones are only counted in `dropped`)."""

    write: Callable[[TrainerStatus], None]
    gate: WriteGate = field(default_factory=WriteGate)
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    on_dropped: Callable[[str, str], None] | None = None
    clock: Clock = time.monotonic
    _told: set[str] = field(default_factory=set)

    def flush(self, final: bool = False) -> float | None:
        """Write the newest progress if it is due; seconds until the next write could be due
        (None: nothing waits to be written)."""
        status = self.tracker.status()
        self._tell_dropped()
        now = self.clock()
        wait = self.gate.wait(status, now, final)
        if wait is None or wait > 0 or status is None:
            return wait
        self.write(status)
        self.gate.wrote(status, now)
        return None

    def _tell_dropped(self) -> None:
        for reason in self.tracker.dropped.keys() - self._told:
            self._told.add(reason)
            if self.on_dropped is not None:
                self.on_dropped(reason, self.tracker.first_dropped.get(reason, ""))

    @property
    def dropped(self) -> Counter[str]:
        return self.tracker.dropped


def dropped_message(reason: str, detail: str) -> str:
    """The one warning a job gets the first time its progress output is left out for `reason`."""
    return (
        f"progress output left out ({reason}): {detail}; "
        "further output left out for this reason is only counted"
    )


# --- where it is kept -------------------------------------------------------------------------
def trainer_status_of(job: TrainingJob) -> TrainerStatus | None:
    """The progress a job carries (its `trainop.dev/trainer-status` annotation), or None."""
    return decode_annotation((job.metadata.annotations or {}).get(ANNOTATION))


def decode_annotation(text: object) -> TrainerStatus | None:
    """The TrainerStatus an annotation holds; None if it holds none (or something too large or
    not JSON: anyone can edit an annotation)."""
    if not isinstance(text, str) or len(text) > MAX_ANNOTATION_CHARS:
        return None
    try:
        return TrainerStatus.from_wire(json.loads(text))
    except ValueError:
        return None


def encode_annotation(status: TrainerStatus) -> str:
    return json.dumps(status.to_wire(), separators=(",", ":"))


def annotate(wire: dict[str, Any], status: TrainerStatus) -> None:
    """Put `status` on a job in wire form (its annotation)."""
    annotations = wire.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[ANNOTATION] = encode_annotation(status)


def carry(job: TrainingJob, trainer_status: Any) -> None:
    """Give a job model the progress of a TrainJob's stored `status.trainerStatus` (in its
    annotation, as every job model carries it); nothing when there is none."""
    status = TrainerStatus.from_wire(trainer_status)
    if status is not None:
        job.metadata.annotations = {
            **(job.metadata.annotations or {}),
            ANNOTATION: encode_annotation(status),
        }


def cells(job: TrainingJob) -> tuple[str, str]:
    """`trainop get`'s PROGRESS and ETA cells ("" when the job reported none)."""
    status = trainer_status_of(job)
    if status is None:
        return "", ""
    percent, seconds = status.progress_percentage, status.estimated_remaining_seconds
    eta = "" if seconds is None else duration(seconds)
    return ("" if percent is None else f"{percent}%"), eta


# --- small helpers ----------------------------------------------------------------------------
def _text(value: float) -> str:
    """A metric value as Trainer stores it: a whole number without `.0`, else the shortest
    text that reads back the same (at most 24 characters)."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _rfc3339(when: datetime) -> str:
    when = when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _bounded_int(value: Any, top: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        return None
    return value


def _wire_metrics(items: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(items, list):
        return ()
    out: dict[str, str] = {}
    for item in items[:MAX_WIRE_METRICS]:
        if not isinstance(item, Mapping):
            continue
        name, value = item.get("name"), item.get("value")
        if _fits(name, MAX_NAME_CHARS) and _fits(value, MAX_VALUE_CHARS):
            out[name] = value
    return tuple(out.items())


def _fits(text: Any, most: int) -> TypeGuard[str]:
    return isinstance(text, str) and 0 < len(text) <= most
