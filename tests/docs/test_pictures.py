"""The pictures in the docs and the README are what their scripts draw from what is committed:
the architecture from docs/diagrams/architecture.py's description, each benchmark plot from its
results file. After a change, run the script and commit the picture with it."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from docs_support import DOCS, ROOT, script

IMAGES = DOCS / "images"
ARCHITECTURE = script(DOCS / "diagrams" / "architecture.py")
PLOT = script(ROOT / "benchmarks" / "plot.py")


def test_the_architecture_picture_is_what_its_description_draws(tmp_path: Path) -> None:
    drawn = tmp_path / "architecture.svg"
    ARCHITECTURE.draw(drawn)
    assert drawn.read_bytes() == (IMAGES / "architecture.svg").read_bytes()


@pytest.mark.parametrize("results", PLOT.default_inputs(), ids=lambda path: path.name)
def test_each_benchmark_plot_is_what_its_results_draw(results: Path, tmp_path: Path) -> None:
    drawn = tmp_path / f"{results.stem}.svg"
    PLOT.draw(json.loads(results.read_text()), drawn)
    assert drawn.read_bytes() == (IMAGES / "benchmarks" / drawn.name).read_bytes()


def test_every_benchmark_plot_has_its_results_file() -> None:
    plotted = {path.stem for path in (IMAGES / "benchmarks").glob("*.svg")}
    assert plotted == {path.stem for path in PLOT.default_inputs()}


def test_a_plot_says_when_where_and_what_it_compares() -> None:
    results = json.loads((ROOT / "benchmarks/results/issue24_latency.json").read_text())
    title = PLOT.title(results)
    assert "2026-12-03" in title and "2ce0fe3" in title and "v1.9.3" in title
    assert "2 cores (AMD EPYC)" in title
    labels = [workload.label for workload in PLOT.workloads(results)]
    assert labels == [
        "60 jobs, 5/s\n(default limits)",
        "60 jobs, 5/s\n(raised limits)",
        "300 jobs at once\n(raised limits)",
    ]


def test_a_results_file_without_both_operators_is_not_plotted() -> None:
    scale = json.loads((ROOT / "benchmarks/results/scale_trainop.json").read_text())
    assert not PLOT.plottable(scale)  # trainop alone: nothing to compare
    assert PLOT.main([str(ROOT / "benchmarks/results/scale_trainop.json")]) == 2


def _kueue_run(operator: str, round_: int, p50: float, p95: float) -> dict[str, object]:
    latency = {"p50": p50, "p95": p95, "max": p95 + 0.1}
    return {"operator": operator, "round": round_, "jobs": 4, "admitted_to_running_s": latency}


def test_a_kueue_run_is_drawn_from_what_kueue_latency_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its sibling modules
    kueue_latency = script(ROOT / "benchmarks" / "kueue_latency.py")
    args = argparse.Namespace(jobs=4, quota=2, run_seconds=1.0, rounds=2)
    runs = [
        _kueue_run("trainop", 0, 0.061, 0.118),
        _kueue_run("upstream", 0, 0.087, 0.167),
        _kueue_run("upstream", 1, 0.079, 0.301),
        _kueue_run("trainop", 1, 0.072, 0.141),
    ]
    document = kueue_latency.document(args, ["--jobs", "4"], runs)
    assert {"date", "machine", "versions"} <= set(document)
    assert document["machine"]["cpus"] and document["versions"]["upstream"] == "v1.9.3"
    assert PLOT.plottable(document)
    rounds = PLOT.kueue_rounds(document)
    assert [r.label for r in rounds] == ["round 1", "round 2", "median of\nthe rounds"]
    assert rounds[-1].figures["upstream v1.9.3"]["p95"] == pytest.approx(234.0)
    (tmp_path / "kueue.json").write_text(json.dumps(document))
    assert PLOT.main([str(tmp_path / "kueue.json"), "--out-dir", str(tmp_path)]) == 0
    svg = (tmp_path / "kueue.svg").read_text()
    assert "p95 Kueue admitted → Running, ms" in svg and "under Kueue v" in svg
    assert document["date"] in svg and ">234<" in svg  # the median's bar label


def test_committed_kueue_results_without_date_and_machine_are_not_plotted() -> None:
    undated = json.loads((ROOT / "benchmarks/results/issue36_kueue_fix.json").read_text())
    assert PLOT.kueue_rounds(undated)  # both operators' rounds are there...
    assert not PLOT.plottable(undated)  # ...but not when and where they ran


def test_the_benchmarks_page_names_every_results_file() -> None:
    page = (DOCS / "benchmarks.md").read_text()
    files = sorted(path.name for path in (ROOT / "benchmarks" / "results").glob("*"))
    assert (
        files and [name for name in files if not re.search(rf"\b{re.escape(name)}\b", page)] == []
    )


def test_every_plot_is_shown_in_the_docs() -> None:
    shown = {
        match
        for page in DOCS.glob("*.md")
        for match in re.findall(
            r"!\[[^\]]*\]\(images/benchmarks/([\w.-]+)\.svg\)", page.read_text()
        )
    }
    drawn = {path.stem for path in PLOT.default_inputs()}
    assert {"issue36_all_running_4workers", "issue24_latency"} <= drawn
    assert drawn - shown == set()


def _sampled_run(operator: str, rss: list[tuple[float, float]]) -> dict[str, object]:
    return {
        "operator": operator,
        "round": 1,
        "operator_rss_samples": rss,
        "queue_depth_samples": [(t, 0.0) for t, _ in rss],
        "done_samples": [(t, 10.0 * t) for t, _ in rss],
    }


def test_a_run_that_sampled_memory_over_time_is_drawn_as_curves(tmp_path: Path) -> None:
    scale = json.loads((ROOT / "benchmarks/results/issue24_latency.json").read_text())
    scale["results"] = [
        _sampled_run("trainop", [(10.0, 65.0), (20.0, 66.5)]),
        _sampled_run("upstream", [(10.0, 48.0), (20.0, 49.0)]),
    ]
    curves = PLOT.series(scale)
    assert curves["trainop"]["operator_rss_samples"] == [(10.0, 65.0), (20.0, 66.5)]
    assert curves["upstream v1.9.3"]["done_samples"][-1] == (20.0, 200.0)
    PLOT.draw(scale, tmp_path / "scale.svg")
    svg = (tmp_path / "scale.svg").read_text()
    assert "operator RSS, MiB, over the run" in svg and "jobs finished, over the run" in svg
    scale["results"][1]["round"] = 2  # two rounds: their curves would not share a time axis
    assert PLOT.series(scale) == {}
    PLOT.draw(scale, tmp_path / "bars.svg")
    assert "over the run" not in (tmp_path / "bars.svg").read_text()
