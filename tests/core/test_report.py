import io

import pytest

from trainop_core.report import collect_metrics, parse_metrics, report


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
    ["starting training", "version=2.1.0", "path=/tmp/x", "name=abc", "loss=nan"],
    ids=[
        "plain text has no metrics",
        "a dotted version is not a number",
        "a path is not a number",
        "a word is not a number",
        "nan is not a number",
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


def test_a_long_word_is_read_in_one_pass() -> None:
    # Quadratic before: each of the word's 4 MB of positions was tried as a name's start, which
    # would run for hours; in one pass it takes milliseconds (the suite's timeout is the bound).
    line = "loss=0.5 " + "x" * 4_000_000 + " acc=0.25 " + "y" * 4_000_000
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
