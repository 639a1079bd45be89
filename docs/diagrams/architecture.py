"""Draws docs/images/architecture.svg, the README's picture, from the description below.

    python docs/diagrams/architecture.py [--out docs/images/architecture.svg]

A row is a layer, top to bottom; the side column is what a site configures. Change the
description, run this, commit both: tests/docs/test_pictures.py fails when the committed picture
is not what this draws. matplotlib only (the `docs` extra): no Graphviz binary.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "images" / "architecture.svg"


@dataclass(frozen=True)
class Box:
    title: str
    detail: str = ""


@dataclass(frozen=True)
class Row:
    label: str
    color: str
    boxes: tuple[Box, ...]


ROWS = (
    Row(
        "where you work",
        "#e8f0fe",
        (
            Box("trainop CLI", "run · get · logs · tune"),
            Box("Flyte", "a task type per kind"),
            Box("KFP", "pipeline components"),
            Box("Ray Tune", "a trial is a job"),
            Box("trainop ui", "jobs, logs, curves"),
        ),
    ),
    Row(
        "one interface", "#fef7e0", (Box("TrainingClient", "create · get · wait · logs · delete"),)
    ),
    Row(
        "one core",
        "#e6f4ea",
        (
            Box("admission", "read → default → validate"),
            Box("kinds as data", "7 v1 kinds, TrainJob"),
            Box("pure planner", "job + observed → plan"),
            Box("decoration", "in-process, then servers"),
        ),
    ),
    Row(
        "where a job runs",
        "#fce8e6",
        (
            Box("this machine", "replicas as processes, local queue"),
            Box("Kubernetes", "trainop operator, webhooks, Kueue"),
            Box("a Ray cluster", "placement group, actors"),
        ),
    ),
)
SIDE_TITLE = "what a site configures"
SIDE = (
    Box("DecoratorConfiguration", "the pods of every job"),
    Box("training runtimes", "ClusterTrainingRuntime"),
    Box("queues", "Kueue's label, local quotas"),
    Box("kind plugins", "trainop.kinds entry points"),
)
SIDE_POINTS_AT = 2  # the row the side column's arrow reaches (the core)

WIDTH, HEIGHT = 100.0, 56.0  # drawing units: the figure is 10 x 5.6 inches
MAIN_RIGHT, ROW_HEIGHT, GAP, TOP = 74.0, 9.0, 4.6, 53.0
GREY = "#5f6368"


def draw(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    # Byte-for-byte the same SVG on every run: fixed ids, text kept as text, no date.
    matplotlib.rcParams.update({"svg.hashsalt": "trainop", "svg.fonttype": "none"})
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(WIDTH / 10, HEIGHT / 10))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(0, HEIGHT)
    ax.axis("off")
    for number, row in enumerate(ROWS):
        y = _row_bottom(number)
        ax.text(1, y + ROW_HEIGHT + 0.8, row.label, fontsize=8, color=GREY, style="italic")
        width = (MAIN_RIGHT - 1) / len(row.boxes)
        for index, box in enumerate(row.boxes):
            _box(ax, (1 + index * width + 0.6, y, width - 1.2, ROW_HEIGHT), box, row.color)
        if number:
            middle = MAIN_RIGHT / 2
            _arrow(
                ax, (middle, y + ROW_HEIGHT + GAP - 0.2), (middle, y + ROW_HEIGHT + 0.2), "<|-|>"
            )
    _side(ax)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


def _row_bottom(number: int) -> float:
    return TOP - number * (ROW_HEIGHT + GAP) - ROW_HEIGHT


def _side(ax: Axes) -> None:
    from matplotlib.patches import FancyBboxPatch

    left, bottom = MAIN_RIGHT + 3, _row_bottom(len(ROWS) - 1)
    height, width = TOP - bottom, WIDTH - MAIN_RIGHT - 4
    style = "round,pad=0.3"
    ax.add_patch(
        FancyBboxPatch(
            (left, bottom), width, height, boxstyle=style, fill=False, ls="--", ec="#9aa0a6"
        )
    )
    ax.text(left + 1, TOP - 2.2, SIDE_TITLE, fontsize=8, color=GREY, style="italic")
    step = (height - 4) / len(SIDE)
    for index, box in enumerate(SIDE):
        y = TOP - 4 - (index + 1) * step + 0.8
        _box(ax, (left + 1, y, width - 2, step - 1.6), box, "#f1f3f4")
    y = _row_bottom(SIDE_POINTS_AT) + ROW_HEIGHT / 2
    _arrow(ax, (left, y), (MAIN_RIGHT, y), "-|>")


def _box(ax: Axes, where: tuple[float, float, float, float], box: Box, color: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    x, y, w, h = where
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.2", fc=color, ec="#80868b"))
    middle = y + h / 2
    title_y = middle + (1.2 if box.detail else 0)
    ax.text(x + w / 2, title_y, box.title, ha="center", va="center", fontsize=9.5, weight="bold")
    if box.detail:
        ax.text(x + w / 2, middle - 1.6, box.detail, ha="center", va="center", fontsize=7)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], style: str) -> None:
    ax.annotate("", end, start, arrowprops={"arrowstyle": style, "color": GREY})


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the SVG")
    draw(parser.parse_args().out)


if __name__ == "__main__":
    main()
