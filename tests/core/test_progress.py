"""Training progress, pure: Trainer's TrainerStatus, the tracker that folds a replica's output into
it, the gate that bounds writes, and hostile output (hypothesis) that must never crash or grow."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainop_core.progress import (
    ANNOTATION,
    MAX_METRICS,
    MAX_PENDING_LINES,
    JobProgress,
    ProgressTracker,
    TrainerStatus,
    WriteGate,
    cells,
    decode_annotation,
    duration,
    encode_annotation,
)
from trainop_core.report import MAX_LINE_CHARS, MAX_NAME_CHARS, parse_metrics

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def tracked(*lines: str) -> TrainerStatus | None:
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed(line, T0)
    return tracker.status()


def test_the_newest_report_of_each_fact_wins_and_the_step_is_a_metric() -> None:
    status = tracked(
        "loss=1.0 progressPercentage=10 estimatedRemainingSeconds=90",
        "epoch 1 done",
        "loss=0.5 acc=0.8 step=7",
    )
    assert status == TrainerStatus(10, 90, (("loss", "0.5"), ("acc", "0.8"), ("step", "7")), T0)


def test_a_report_of_progress_replaces_both_fields_and_metrics_accumulate_by_name() -> None:
    status = tracked(
        "progressPercentage=90 estimatedRemainingSeconds=30 loss=0.2",
        "eval_accuracy=0.9",
        "progressPercentage=100",  # done: no time left to guess, none carried over
    )
    assert status == TrainerStatus(100, None, (("eval_accuracy", "0.9"), ("loss", "0.2")), T0)


def test_metrics_read_as_trainers_newest_report_first_then_older_names() -> None:
    """Each of Trainer's reports replaces its metrics list; a line may report only some names,
    so the newest line's come first, in its order, each name once with its newest value."""
    status = tracked("loss=0.9 acc=0.1 lr=0.01", "acc=0.5 loss=0.4", "eval_loss=0.6")
    assert status is not None
    assert status.metrics == (("eval_loss", "0.6"), ("acc", "0.5"), ("loss", "0.4"), ("lr", "0.01"))


def test_over_the_bound_the_least_recently_reported_names_go() -> None:
    tracker = ProgressTracker(max_metrics=3)
    tracker.feed("a=1 b=1 c=1")
    tracker.feed("d=2 a=2")
    status = tracker.status()
    assert status is not None and status.metrics == (("d", "2"), ("a", "2"), ("b", "1"))
    assert tracker.dropped["too-many-metrics"] == 1


def test_a_replica_that_reports_nothing_has_no_progress() -> None:
    assert tracked("starting", "epoch 1 of 3", "loss: 0.3 (not the contract)") is None


def test_the_wire_form_is_trainers_and_reads_back() -> None:
    status = TrainerStatus(45, 120, (("loss", "0.2347"),), T0)
    wire = status.to_wire()
    assert wire == {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.2347"}],
        "lastUpdatedTime": "2026-12-01T10:00:00Z",
    }
    assert TrainerStatus.from_wire(wire) == status
    assert decode_annotation(encode_annotation(status)) == status
    assert status.to_patch()["estimatedRemainingSeconds"] == 120
    assert TrainerStatus(metrics=(("a", "1"),)).to_patch()["progressPercentage"] is None


def test_at_most_max_metrics_names_are_kept_and_the_rest_counted() -> None:
    tracker = ProgressTracker()
    tracker.feed(" ".join(f"m{i}=1" for i in range(MAX_METRICS + 5)))
    tracker.feed("m0=2")  # a known name is still updated
    status = tracker.status()
    assert status is not None and len(status.metrics) == MAX_METRICS
    assert dict(status.metrics)["m0"] == "2"
    assert tracker.dropped["too-many-metrics"] == 5


def test_a_flood_keeps_the_newest_lines_and_counts_the_others() -> None:
    tracker = ProgressTracker()
    for i in range(MAX_PENDING_LINES + 100):
        tracker.feed(f"progressPercentage={min(i, 100)} loss={i}")
    status = tracker.status()
    assert status is not None and dict(status.metrics)["loss"] == str(MAX_PENDING_LINES + 99)
    assert tracker.dropped["flood"] == 100


def test_chunks_are_cut_into_lines_and_an_endless_line_stays_bounded() -> None:
    tracker = ProgressTracker()
    tracker.feed_chunk("loss=0.5 progress", T0)
    tracker.feed_chunk("Percentage=30\nacc=0.", T0)
    assert tracker.status() == TrainerStatus(30, None, (("loss", "0.5"),), T0)  # acc: unfinished
    for _ in range(100):
        tracker.feed_chunk("x=1 " * 1000)  # never a newline
    assert len(tracker._partial) <= MAX_LINE_CHARS + 1
    tracker.feed_chunk("\n")
    tracker.status()
    assert tracker.dropped["line-too-long"] == 1


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ({"progressPercentage": 101}, TrainerStatus()),
        ({"progressPercentage": True}, TrainerStatus()),
        ({"estimatedRemainingSeconds": -1}, TrainerStatus()),
        ({"metrics": [{"name": "a", "value": 1}, {"name": "", "value": "1"}, 7]}, TrainerStatus()),
        ({"metrics": [{"name": "a" * 65, "value": "1"}]}, TrainerStatus()),
        ({"lastUpdatedTime": "yesterday"}, TrainerStatus()),
    ],
    ids=[
        "a percent above 100 is left out",
        "a boolean is not a percent",
        "a negative time left is left out",
        "metrics that are not name and string value are left out",
        "a name longer than Trainer allows is left out",
        "a time that is not RFC 3339 is left out",
    ],
)
def test_a_stored_status_is_read_as_far_as_it_fits_trainers_schema(
    wire: dict[str, Any], expected: TrainerStatus
) -> None:
    assert TrainerStatus.from_wire(wire) == expected


@pytest.mark.parametrize("text", [None, 3, "{", "[]", "x" * 70000], ids=str)
def test_an_annotation_that_holds_no_status_is_none(text: Any) -> None:
    assert decode_annotation(text) is None


def test_the_gate_writes_the_first_at_once_then_once_an_interval_and_only_news() -> None:
    gate = WriteGate(interval=5.0)
    first = TrainerStatus(10, None, (), T0)
    assert gate.wait(first, now=100.0) == 0.0
    gate.wrote(first, 100.0)
    later = TrainerStatus(20, None, (), T0 + timedelta(seconds=1))
    assert gate.wait(later, now=101.0) == pytest.approx(4.0)
    assert gate.wait(later, now=101.0, final=True) == 0.0  # the replica ended: at once
    assert gate.wait(later, now=106.0) == 0.0
    same = TrainerStatus(10, None, (), T0 + timedelta(seconds=30))
    assert gate.wait(same, now=200.0) is None  # nothing new: no write
    beat = TrainerStatus(10, None, (), T0 + timedelta(seconds=61))
    assert gate.wait(beat, now=200.0) == 0.0  # still reporting: lastUpdatedTime, a minute on
    assert gate.wait(None, now=200.0) is None


def test_job_progress_writes_when_due_tells_each_drop_once_and_retries_a_failed_write() -> None:
    clock = [0.0]
    written: list[TrainerStatus] = []
    told: list[str] = []
    failing = [True]

    def write(status: TrainerStatus) -> None:
        if failing[0]:
            raise OSError("disk full")
        written.append(status)

    progress = JobProgress(write, on_dropped=lambda r, d: told.append(r), clock=lambda: clock[0])
    progress.tracker.feed("loss=nan progressPercentage=5")
    with pytest.raises(OSError):
        progress.flush()
    failing[0] = False
    progress.tracker.feed("loss=inf")
    assert progress.flush() is None
    assert [s.progress_percentage for s in written] == [5]
    progress.tracker.feed("progressPercentage=6")
    assert progress.flush() == pytest.approx(5.0)  # due in an interval
    clock[0] = 5.0
    progress.flush()
    assert [s.progress_percentage for s in written] == [5, 6]
    assert told == ["not-finite"] and progress.dropped["not-finite"] == 2


def test_get_cells_and_kubectls_durations() -> None:
    from builders import make_job

    job = make_job("PyTorchJob", "p").master().job()
    assert cells(job) == ("", "")
    job.metadata.annotations = {ANNOTATION: encode_annotation(TrainerStatus(45, 3725))}
    assert cells(job) == ("45%", "1h2m")
    assert [duration(s) for s in (0, 59, 119, 200, 3599, 86400 * 3)] == [
        "0s", "59s", "119s", "3m20s", "59m", "3d"
    ]  # fmt: skip


# --- hostile output -------------------------------------------------------------------------------
NAMES = st.text(st.sampled_from("abcXYZ_|-0123456789"), min_size=1, max_size=80)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "-inf", "Infinity", "1e999", "-0", ".5", "5.", "1e-400", "0x10"]),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
)
PAIRS = st.tuples(NAMES, st.sampled_from(["=", " = ", "=="]), NUMBERS).map("".join)
LINES = st.one_of(
    st.lists(PAIRS, max_size=12).map(" ".join),
    st.text(max_size=300),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=4), st.integers(0, 3000)),
)


@settings(max_examples=300, deadline=None)
@given(LINES)
def test_any_line_parses_without_raising_and_only_to_what_trainer_can_store(line: str) -> None:
    record = parse_metrics(line)
    if record is None:
        return
    assert all(math.isfinite(v) and len(n) <= MAX_NAME_CHARS for n, v in record.values.items())
    assert record.progress_percentage is None or 0 <= record.progress_percentage <= 100
    assert record.estimated_remaining_seconds is None or record.estimated_remaining_seconds >= 0


@settings(max_examples=100, deadline=None)
@given(st.lists(LINES, max_size=400))
def test_any_output_folds_into_a_status_trainers_schema_accepts(lines: list[str]) -> None:
    tracker = ProgressTracker()
    for line in lines:
        tracker.feed_chunk(line + "\n")
    status = tracker.status()
    assert len(tracker._pending) == 0
    if status is None:
        return
    wire = json.loads(encode_annotation(status))
    assert TrainerStatus.from_wire(wire) == status.__class__(
        status.progress_percentage,
        status.estimated_remaining_seconds,
        status.metrics,
        status.last_updated_time.replace(microsecond=0) if status.last_updated_time else None,
    )
    assert len(status.metrics) <= MAX_METRICS
    assert all(0 < len(v) <= 64 and 0 < len(n) <= 64 for n, v in status.metrics)
