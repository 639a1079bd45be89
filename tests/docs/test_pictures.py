"""The pictures in the docs and the README are what their scripts draw from what is committed:
the architecture from docs/diagrams/architecture.py's description, each benchmark plot from its
results file. After a change, run the script and commit the picture with it."""

from __future__ import annotations

import json
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
