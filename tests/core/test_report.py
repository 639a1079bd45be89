import io
import math

import pytest

from trainop_core.report import (
    MAX_LINE_CHARS,
    collect_metrics,
    collect_progress,
    parse_metrics,
    report,
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("loss=0.5", {"loss": 0.5}),
        ("epoch 3: loss = 0.25 accuracy=0.9", {"loss": 0.25, "accuracy": 0.9}),
        ("lr=1e-3 val|acc=-2.5E+1", {"lr": 0.001, "val|acc": -25.0}),
        ("top-1=.75", {"top-1": 0.75}),
    ],
    ids=[
        "a single pair is read",
        "several pairs with spaces around equals are read",
        "exponents and bar names are read",
        "dashes and leading-dot values are read",
    ],
)
def test_pairs_on_a_line_are_parsed(line: str, expected: dict[str, float]) -> None:
    record = parse_metrics(line)
    assert record is not None
    assert record.values == expected


@pytest.mark.parametrize(
    "line",
    ["starting training", "version=2.1.0", "path=/tmp/x", "name=abc", "x" * 9000],
    ids=[
        "plain text has no metrics",
        "a dotted version is not a number",
        "a path is not a number",
        "a word is not a number",
        "a long line without a pair is only noise",
    ],
)
def test_lines_without_numeric_pairs_give_nothing(line: str) -> None:
    assert parse_metrics(line) is None


def test_step_and_leading_timestamp_say_when_not_what() -> None:
    record = parse_metrics("2026-11-29T10:00:00Z loss=0.1 step=7")
    assert record is not None
    assert record.values == {"loss": 0.1}
    assert record.step == 7
    assert record.timestamp is not None and record.timestamp.hour == 10


def test_collect_keeps_the_last_value_of_each_metric() -> None:
    assert collect_metrics(["loss=1 acc=0.5", "noise", "loss=0.2"]) == {"loss": 0.2, "acc": 0.5}


def test_report_prints_what_parse_reads_back() -> None:
    out = io.StringIO()
    report(loss=0.125, accuracy=0.75, step=4, file=out)
    record = parse_metrics(out.getvalue())
    assert record is not None
    assert record.values == {"loss": 0.125, "accuracy": 0.75}
    assert record.step == 4


def test_report_rejects_a_name_the_parser_could_not_read() -> None:
    with pytest.raises(ValueError, match="metric name 'bad name'"):
        report(**{"bad name": 1.0})


@pytest.mark.parametrize(
    ("line", "reasons"),
    [
        ("loss=nan", ["not-finite"]),
        ("loss=-Infinity acc=0.5", ["not-finite"]),
        ("loss=1e999", ["not-finite"]),
        ("progressPercentage=101", ["out-of-range"]),
        ("estimatedRemainingSeconds=-1", ["out-of-range"]),
        ("step=1e300 timestamp=1e300", ["out-of-range", "out-of-range"]),
        ("x" * 65 + "=1", ["name-too-long"]),
        ("loss=1 " + "y" * 9000, ["line-too-long"]),
    ],
    ids=[
        "nan is dropped and said",
        "an infinity is dropped, the finite pair kept",
        "a number too large for a float is dropped",
        "a progress above 100 percent is dropped",
        "a negative remaining time is dropped",
        "a step or timestamp out of range is dropped instead of raising",
        "a name longer than Trainer allows is dropped",
        "a line longer than the parser reads is dropped whole",
    ],
)
def test_what_cannot_be_reported_is_dropped_and_said(line: str, reasons: list[str]) -> None:
    record = parse_metrics(line)
    assert record is not None
    assert [d.reason for d in record.dropped] == reasons
    assert all(math.isfinite(v) for v in record.values.values())


def test_progress_fields_are_read_apart_from_the_metrics() -> None:
    record = parse_metrics("loss=0.2 progressPercentage=45.9 estimatedRemainingSeconds=120.5")
    assert record is not None
    assert record.values == {"loss": 0.2}
    assert record.progress() == {"progressPercentage": 45, "estimatedRemainingSeconds": 120}


def test_a_line_with_only_progress_is_a_record() -> None:
    record = parse_metrics("progressPercentage=100")
    assert record is not None and record.values == {} and record.progress_percentage == 100


def test_report_prints_progress_with_trainers_names() -> None:
    out = io.StringIO()
    report(loss=0.5, progress_percent=45.5, estimated_remaining_seconds=90, file=out)
    assert out.getvalue() == "loss=0.5 progressPercentage=45 estimatedRemainingSeconds=90\n"
    record = parse_metrics(out.getvalue())
    assert record is not None and record.progress() == {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 90,
    }


@pytest.mark.parametrize("percent", [-1, 100.5, float("nan")], ids=["negative", "over", "nan"])
def test_report_refuses_a_progress_outside_its_range(percent: float) -> None:
    with pytest.raises(ValueError, match="progress_percent"):
        report(progress_percent=percent, file=io.StringIO())


def test_collect_progress_keeps_the_last_of_each_field() -> None:
    lines = ["progressPercentage=10 estimatedRemainingSeconds=90", "noise", "progressPercentage=20"]
    assert collect_progress(lines) == {"progressPercentage": 20, "estimatedRemainingSeconds": 90}


def test_a_long_word_is_read_in_one_pass() -> None:
    # Quadratic before: each position of a long word was tried as a name's start (a 1 KiB word
    # took 20 ms, a 256 KiB one minutes). Lines are read up to MAX_LINE_CHARS; the longest words
    # such a line can hold are read in one pass.
    word = (MAX_LINE_CHARS - 40) // 2
    line = "loss=0.5 " + "x" * word + " acc=0.25 " + "y" * word
    assert len(line) <= MAX_LINE_CHARS
    record = parse_metrics(line)
    assert record is not None and record.values == {"loss": 0.5, "acc": 0.25}


@pytest.mark.parametrize(
    ("line", "expected"),
    [("xloss=3", {"xloss": 3.0}), ("foo.bar=1", {"bar": 1.0}), ("a|b-c=4", {"a|b-c": 4.0})],
    ids=["a name glued to a word is the whole word", "after a dot", "bars and dashes"],
)
def test_a_name_is_the_whole_run_of_name_characters(line: str, expected: dict[str, float]) -> None:
    record = parse_metrics(line)
    assert record is not None and record.values == expected
