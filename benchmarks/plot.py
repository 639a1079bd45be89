"""Pictures of benchmarks/operator_vs_upstream.py's results: trainop against upstream v1.9.3.

    python benchmarks/plot.py [RESULTS.json ...] [--out-dir docs/images/benchmarks]

draws one SVG per results file (default: every file under benchmarks/results/ that compares
trainop with upstream v1.9.3 and says when and where it ran): for benchmarks/operator_vs_upstream.py
jobs per second, p95 create -> Succeeded, operator CPU seconds per job and API requests per job,
one pair of bars per workload; for benchmarks/kueue_latency.py admitted -> Running p50 and p95,
one pair of bars per round and one for the rounds' median. A one-round run that sampled the
jobs finished, the work-queue depth and the operators' RSS over time (operator_vs_upstream.py
does) gets a second row with those as lines. The run's date, trainop commit and
machine are in the title; Kueue results committed without a date and machine are not drawn
(docs/benchmarks.md keeps them as tables). The figures are the medians the
results file holds (benchmarks/report.py prints them as tables). tests/docs/test_pictures.py
fails when a committed picture is not what this draws from the committed results.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OUT_DIR = HERE.parent / "docs" / "images" / "benchmarks"
OPERATORS = ("trainop", "upstream v1.9.3")
COLORS = {"trainop": "#1a73e8", "upstream v1.9.3": "#9aa0a6"}
#: (median key, panel title, value format)
PANELS = (
    ("jobs_per_second", "jobs per second (higher is better)", "{:.2f}"),
    ("latency_p95", "p95 create → Succeeded, s (lower is better)", "{:.1f}"),
    ("cpu_per_job", "operator CPU s per job (lower is better)", "{:.3f}"),
    ("requests_per_job", "API requests per job (lower is better)", "{:.1f}"),
)
#: drawn when the run timed it (`--all-running`)
ALL_RUNNING = ("all_running_p95", "p95 create → all pods Running, s (lower is better)", "{:.2f}")
#: drawn over time when the run sampled it (operator_vs_upstream.py's samples, one line per
#: operator): (results key, panel title)
SERIES = (
    ("done_samples", "jobs finished"),
    ("queue_depth_samples", "work-queue depth"),
    ("operator_rss_samples", "operator RSS, MiB"),
)
MEDIAN_KEY = re.compile(r"^(?P<comparison>[^/]+) / (?P<operator>.+) \((?P<limits>\w+)\)$")


@dataclass(frozen=True)
class Workload:
    label: str
    figures: dict[str, dict[str, float]]  # operator -> median key -> value


def workloads(results: dict[str, Any]) -> list[Workload]:
    """The results' medians for trainop and upstream v1.9.3, one entry per workload that has
    both, in the file's order; a saturating comparison is labelled with its job count."""
    pairs: dict[str, dict[str, dict[str, float]]] = {}
    for key, medians in results["medians"].items():
        match = MEDIAN_KEY.match(key)
        if not match or match["operator"] not in OPERATORS:
            continue
        label = _label(match["comparison"], match["limits"], results.get("workload", {}))
        pairs.setdefault(label, {})[match["operator"]] = medians
    return [Workload(label, ops) for label, ops in pairs.items() if set(ops) == set(OPERATORS)]


def _label(comparison: str, limits: str, workload: dict[str, Any]) -> str:
    if comparison.endswith("-saturating"):
        return f"{workload.get('saturate', '?')} jobs at once\n({limits} limits)"
    return f"{workload.get('jobs', '?')} jobs, {workload.get('rate', 0):g}/s\n({limits} limits)"


def plottable(results: dict[str, Any]) -> bool:
    """Whether a results file says when and where it ran and compares the two operators."""
    if not {"date", "machine", "versions"} <= set(results):
        return False
    if "kueue" in results:
        return bool(kueue_rounds(results))
    return "medians" in results and bool(workloads(results))


#: kueue_latency.py's setup names -> the operators' names here
KUEUE_OPERATORS = {"trainop": OPERATORS[0], "upstream": OPERATORS[1]}
KUEUE_PANELS = (
    ("p50", "p50 Kueue admitted → Running, ms (lower is better)", "{:.0f}"),
    ("p95", "p95 Kueue admitted → Running, ms (lower is better)", "{:.0f}"),
)


def kueue_rounds(results: dict[str, Any]) -> list[Workload]:
    """kueue_latency.py's admitted -> Running p50 and p95 in ms, one entry per round that ran both
    operators, then the median of those rounds; empty when no round ran both."""
    by_round: dict[int, dict[str, dict[str, float]]] = {}
    for run in results.get("results", []):
        operator = KUEUE_OPERATORS.get(run.get("operator", ""))
        if operator and "admitted_to_running_s" in run:
            latency = run["admitted_to_running_s"]
            figures = {key: 1000 * latency[key] for key, _, _ in KUEUE_PANELS}
            by_round.setdefault(int(run["round"]), {})[operator] = figures
    rounds = [
        Workload(f"round {number + 1}", ops)
        for number, ops in sorted(by_round.items())
        if set(ops) == set(OPERATORS)
    ]
    if len(rounds) < 2:
        return rounds
    median = {
        op: {
            key: statistics.median(r.figures[op][key] for r in rounds) for key, _, _ in KUEUE_PANELS
        }
        for op in OPERATORS
    }
    return [*rounds, Workload("median of\nthe rounds", median)]


def kueue_title(results: dict[str, Any]) -> str:
    machine, versions, load = results["machine"], results["versions"], results["workload"]
    return (
        f"trainop {versions['trainop']} against Kubeflow's training operator v1.9.3 under Kueue "
        f"{results['kueue']}, measured {results['date']}\n"
        f"{machine['cpus']} cores ({machine['cpu_model']}), {machine['memory_gib']:.0f} GiB, "
        f"Python {machine['python']}, kube-apiserver {versions['kubernetes']}; "
        f"{load['jobs']} PyTorchJobs of 2 pods created at once, quota {load['quota']} CPUs, "
        f"pods run {load['run_seconds']:g} s"
    )


def title(results: dict[str, Any]) -> str:
    machine, versions, load = results["machine"], results["versions"], results["workload"]
    rounds = min(int(m.get("rounds", 1)) for w in workloads(results) for m in w.figures.values())
    return (
        f"trainop {versions['trainop']} against Kubeflow's training operator v1.9.3, "
        f"measured {results['date']}\n"
        f"{machine['cpus']} cores ({machine['cpu_model']}), {machine['memory_gib']:.0f} GiB, "
        f"Python {machine['python']}, kube-apiserver {versions['kubernetes']}; "
        f"{load['replicas']} pods per job, each running {load['run_seconds']:g} s; "
        f"medians of {rounds} rounds"
    )


def series(results: dict[str, Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Samples over time of a one-round run that sampled them: operator -> results key ->
    [(seconds, value)]; empty when the run has no such samples or more than one round."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    runs = [r for r in results.get("results", []) if r.get("operator_rss_samples")]
    if not runs or any(int(r.get("round", 1)) != 1 for r in runs):
        return {}
    for run in runs:
        operator = KUEUE_OPERATORS.get(run["operator"])
        if operator is None:
            continue
        out[operator] = {key: [tuple(p) for p in run.get(key) or []] for key, _ in SERIES}
    return out if set(out) == set(OPERATORS) else {}


def draw(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    # Byte-for-byte the same SVG on every run: fixed ids, text kept as text, no date.
    matplotlib.rcParams.update({"svg.hashsalt": "trainop", "svg.fonttype": "none"})
    import matplotlib.pyplot as plt

    panels: tuple[tuple[str, str, str], ...]
    if "kueue" in results:
        groups, panels, heading = kueue_rounds(results), KUEUE_PANELS, kueue_title(results)
        width = 4.2
    else:
        groups, heading, width = workloads(results), title(results), 3.1
        timed = all(g.figures[o].get(ALL_RUNNING[0]) is not None for g in groups for o in OPERATORS)
        panels = (*PANELS, ALL_RUNNING) if timed else PANELS
    over_time = {} if "kueue" in results else series(results)
    if over_time:  # bars above, lines below: each row's panels share its width
        fig = plt.figure(figsize=(width * len(panels), 7.2))
        grid = fig.add_gridspec(2, len(panels) * len(SERIES))
        span = len(SERIES)
        axes = [fig.add_subplot(grid[0, i * span : (i + 1) * span]) for i in range(len(panels))]
    else:
        fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.6))
    for ax, (key, panel_title, fmt) in zip(axes, panels, strict=True):
        _panel(ax, groups, key, panel_title, fmt)
    axes[0].legend(loc="upper left", fontsize=7, frameon=False)
    span = len(panels)
    for i, (key, panel_title) in enumerate(SERIES if over_time else ()):
        ax = fig.add_subplot(grid[1, i * span : (i + 1) * span])
        _lines(ax, {op: samples[key] for op, samples in over_time.items()}, panel_title)
        if i == 0:
            ax.legend(loc="upper left", fontsize=7, frameon=False)
    fig.suptitle(heading, fontsize=8.5)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


def _panel(ax: Axes, groups: list[Workload], key: str, panel_title: str, fmt: str) -> None:
    width = 0.38
    for offset, operator in ((-width / 2, OPERATORS[0]), (width / 2, OPERATORS[1])):
        values = [group.figures[operator][key] for group in groups]
        xs = [index + offset for index in range(len(groups))]
        bars = ax.bar(xs, values, width, label=operator, color=COLORS[operator])
        ax.bar_label(bars, [fmt.format(v) for v in values], fontsize=6.5, padding=1)
    ax.set_title(panel_title, fontsize=8)
    ax.set_xticks(range(len(groups)), [group.label for group in groups], fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.margins(y=0.15)
    ax.spines[["top", "right"]].set_visible(False)


def _lines(ax: Axes, samples: dict[str, list[tuple[float, float]]], panel_title: str) -> None:
    for operator in OPERATORS:
        points = samples.get(operator) or []
        minutes = [t / 60 for t, _ in points]
        ax.plot(minutes, [v for _, v in points], label=operator, color=COLORS[operator], lw=1)
    ax.set_title(f"{panel_title}, over the run", fontsize=8)
    ax.set_xlabel("minutes since the first job was created", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.set_ylim(bottom=0)
    ax.spines[["top", "right"]].set_visible(False)


def default_inputs() -> list[Path]:
    return [path for path in sorted(RESULTS.glob("*.json")) if plottable(_read(path))]


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, help="results files (default: all)")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="where the SVGs go")
    args = parser.parse_args(argv)
    for path in args.results or default_inputs():
        results = _read(path)
        if not plottable(results):
            print(f"{path}: no dated trainop/upstream v1.9.3 figures to plot", file=sys.stderr)
            return 2
        out = args.out_dir / f"{path.stem}.svg"
        draw(results, out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
