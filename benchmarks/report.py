"""Tables, medians and goals for benchmarks/operator_vs_upstream.py's results.

    python benchmarks/report.py [benchmarks/results/operator_vs_upstream.json] [--markdown]

prints the tables again from a results file (``--markdown``: the README's table of medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

#: (key, label, format); per-job figures are derived in `derived`.
FIGURES = (
    ("jobs_per_second", "jobs/s", "{:.2f}"),
    ("wall_seconds", "wall time to all Succeeded (s)", "{:.1f}"),
    ("latency_p50", "create->Succeeded p50 (s)", "{:.1f}"),
    ("latency_p95", "create->Succeeded p95 (s)", "{:.1f}"),
    ("all_running_p50", "create->all its pods Running p50 (s)", "{:.3f}"),
    ("all_running_p95", "create->all its pods Running p95 (s)", "{:.3f}"),
    ("requests_per_job", "API requests per job", "{:.1f}"),
    ("writes_per_job", "  of which writes", "{:.1f}"),
    ("reconciles_per_job", "reconciles per job", "{:.1f}"),
    ("watches_open", "watches open at the end", "{:.0f}"),
    ("watches_opened", "watches opened in the run", "{:.0f}"),
    ("cpu_per_job", "operator CPU s per job", "{:.3f}"),
    ("cpu_share", "operator CPU share of a core", "{:.2f}"),
    ("operator_cpu_seconds", "operator CPU s", "{:.1f}"),
    ("operator_peak_rss_mib", "operator peak RSS (MiB)", "{:.1f}"),
    ("rss_growth_per_1000_jobs", "RSS growth per 1,000 jobs done, 2nd half (MiB)", "{:.2f}"),
    ("queue_depth_max", "deepest work queue", "{:.0f}"),
    ("submit_seconds", "seconds to create the jobs", "{:.1f}"),
    ("apiserver_cpu_per_job", "kube-apiserver CPU s per job", "{:.3f}"),
    ("etcd_cpu_per_job", "etcd CPU s per job", "{:.3f}"),
    ("control_plane_cpu_per_job", "control plane CPU s per job", "{:.3f}"),
    ("kubelet_cpu_seconds", "kubelet stand-in CPU s", "{:.1f}"),
    ("load_1min_at_start", "load average at start", "{:.1f}"),
)
WRITE_VERBS = ("create", "update", "patch", "delete")


def derived(result: Obj) -> Obj:
    """The result with its per-job figures added."""
    jobs = max(result["jobs"], 1)
    server = result.get("server_cpu_seconds") or {}
    writes = sum(n for k, n in result["requests"].items() if k.split(" ", 1)[0] in WRITE_VERBS)
    wall = result.get("wall_seconds")
    return {
        **result,
        "writes_per_job": writes / jobs,
        "cpu_per_job": result["operator_cpu_seconds"] / jobs,
        # a share near 1 is an operator that has run out of its one core (the GIL's, for trainop)
        "cpu_share": result["operator_cpu_seconds"] / wall if wall else None,
        "apiserver_cpu_per_job": server.get("kube-apiserver", 0.0) / jobs,
        "etcd_cpu_per_job": server.get("etcd", 0.0) / jobs,
        # kube-apiserver, etcd and kube-controller-manager (its garbage collector deletes the
        # children of jobs deleted after their TTL)
        "control_plane_cpu_per_job": sum(server.values()) / jobs if server else None,
        "rss_growth_per_1000_jobs": rss_growth(result),
    }


def rss_growth(result: Obj) -> float | None:
    """MiB the operator's RSS grows per 1,000 jobs done: the least-squares slope of RSS against
    jobs finished over the samples of the run's second half (the first fills the caches of the
    jobs in flight). Near 0 is memory that stays flat however many jobs have come and gone;
    None without samples (a run without --scrape-every's RSS, or too short)."""
    done = {t: n for t, n in result.get("done_samples") or []}
    points = [(done[t], mib) for t, mib in result.get("operator_rss_samples") or [] if t in done]
    half = [(n, mib) for n, mib in points if n >= result["jobs"] / 2]
    if len(half) < 3:
        return None
    try:
        slope, _ = statistics.linear_regression(*zip(*half, strict=True))
    except statistics.StatisticsError:  # no job finished over the second half's samples
        return None
    return 1000 * slope


def one_line(result: Obj) -> str:
    r = derived(result)
    return (
        f"{r['succeeded']}/{r['jobs']} Succeeded, {_fmt(r['jobs_per_second'], '{:.2f}')} jobs/s, "
        f"p50 {_fmt(r['latency_p50'], '{:.1f}')} s, {r['requests_per_job']:.1f} requests/job, "
        f"CPU {r['cpu_per_job']:.3f} s/job, peak RSS {r['operator_peak_rss_mib']:.0f} MiB, "
        f"queue <= {r['queue_depth_max']:.0f}, load {r['load_1min_at_start']:.1f}"
        + (
            f", RSS {r['rss_growth_per_1000_jobs']:+.2f} MiB per 1,000 jobs done (2nd half)"
            if r["rss_growth_per_1000_jobs"] is not None
            else ""
        )
    )


def _fmt(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _groups(results: list[Obj]) -> dict[tuple[str, str, str], list[Obj]]:
    """(comparison, limits, setup name) -> its results in round order."""
    groups: dict[tuple[str, str, str], list[Obj]] = defaultdict(list)
    for result in results:
        limits = "raised" if result["limits"]["qps"] > 20 else "default"
        groups[(result["comparison"], limits, result["setup"])].append(derived(result))
    return groups


def medians(results: list[Obj]) -> dict[str, Obj]:
    """setup label ("comparison / setup name") -> the median of each figure over the rounds."""
    out: dict[str, Obj] = {}
    for (comparison, _, name), runs in _groups(results).items():
        med: Obj = {"rounds": len(runs), "operator": runs[0]["operator"]}
        for key, _, _ in FIGURES:
            values = [r[key] for r in runs if r.get(key) is not None]
            med[key] = statistics.median(values) if values else None
        keys = {k for r in runs for k in r["requests"]}
        med["requests_per_job_by_verb_resource"] = {
            k: statistics.median(r["requests"].get(k, 0) / r["jobs"] for r in runs)
            for k in sorted(keys)
        }
        out[f"{comparison} / {name}"] = med
    return out


#: (workload, goal, figure, comparison, factor): issue 24's "Done when", judged on the medians.
GOALS = (
    ("v1.9 default", "jobs/s >= upstream's", "jobs_per_second", ">=", 1.0),
    ("v1.9 default", "p95 latency <= upstream's", "latency_p95", "<=", 1.0),
    ("v1.9 default", "API requests per job <= upstream's", "requests_per_job", "<=", 1.0),
    ("v1.9 default", "CPU seconds per job <= upstream's", "cpu_per_job", "<=", 1.0),
    ("v1.9 default", "peak RSS <= 2x upstream's", "operator_peak_rss_mib", "<=", 2.0),
    ("v1.9 raised", "jobs/s >= upstream's", "jobs_per_second", ">=", 1.0),
    ("v1.9 raised", "p95 latency <= upstream's", "latency_p95", "<=", 1.0),
    ("v1.9 raised", "API requests per job <= upstream's", "requests_per_job", "<=", 1.0),
    ("v1.9 raised", "CPU seconds per job <= upstream's", "cpu_per_job", "<=", 1.0),
    ("v1.9-saturating raised", "jobs/s >= upstream's", "jobs_per_second", ">=", 1.0),
    ("v1.9-saturating raised", "p95 latency <= upstream's", "latency_p95", "<=", 1.0),
    ("v1.9-saturating raised", "API requests per job <= upstream's", "requests_per_job", "<=", 1.0),
    ("v1.9-saturating raised", "CPU seconds per job <= upstream's", "cpu_per_job", "<=", 1.0),
    ("v1.9 raised", "all pods Running p50 <= upstream's", "all_running_p50", "<=", 1.0),
    ("v1.9 raised", "all pods Running p95 <= upstream's", "all_running_p95", "<=", 1.0),
)


def goals(med: dict[str, Obj]) -> list[Obj]:
    """The issue's goals for every workload measured with both operators."""

    def pick(comparison: str, operator: str, limits: str) -> Obj | None:
        for label, figures in med.items():
            if (
                label.startswith(f"{comparison} /")
                and figures["operator"] == operator
                and label.endswith(f"({limits})")
            ):
                return figures
        return None

    out = []
    for workload, text, key, op, factor in GOALS:
        comparison, limits = workload.split(" ")
        ours, theirs = pick(comparison, "trainop", limits), pick(comparison, "upstream", limits)
        if ours is None or theirs is None:
            continue
        a, b = ours.get(key), theirs.get(key)
        if a is None and b is None:
            continue  # not measured in this run (e.g. all_running without --all-running)
        met = None
        if a is not None and b is not None:
            met = a <= factor * b if op == "<=" else a >= factor * b
        out.append({"goal": f"{workload}: {text}", "trainop": a, "upstream": b, "met": met})
    return out


def tables(document: Obj) -> str:
    lines = []
    groups = _groups(document["results"])
    for comparison, limits in sorted({(c, lim) for c, lim, _ in groups}):
        names = [n for c, lim, n in groups if (c, lim) == (comparison, limits)]
        lines += ["", f"== {comparison}, client limits {limits} =="]
        header = ["figure"]
        columns: list[list[Obj]] = []
        for name in names:
            runs = groups[(comparison, limits, name)]
            header += [f"{name} r{r['round']}" for r in runs] + [f"{name} median"]
            columns.append(runs)
        rows = [header]
        for key, label, pattern in FIGURES:
            row = [label]
            for runs in columns:
                values = [r.get(key) for r in runs]
                row += [_fmt(v, pattern) for v in values]
                present = [v for v in values if v is not None]
                row.append(_fmt(statistics.median(present) if present else None, pattern))
            rows.append(row)
        lines += _render(rows)
        lines += ["", "  API requests per job by verb and resource (median over rounds)"]
        keys = sorted({k for runs in columns for r in runs for k in r["requests"]})
        rows = [["request", *names]]
        for key in keys:
            rows.append(
                [key]
                + [
                    f"{statistics.median(r['requests'].get(key, 0) / r['jobs'] for r in runs):.2f}"
                    for runs in columns
                ]
            )
        lines += _render(rows)
    if document.get("goals"):
        lines += ["", "== goals (medians) =="]
        for goal in document["goals"]:
            state = {True: "met", False: "NOT met", None: "unknown"}[goal["met"]]
            lines.append(
                f"  {state:8} {goal['goal']}: trainop {_fmt(goal['trainop'], '{:.3f}')}, "
                f"upstream {_fmt(goal['upstream'], '{:.3f}')}"
            )
    return "\n".join(lines)


def _render(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                         enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]  # fmt: skip


def by_verb(per_resource: dict[str, float]) -> dict[str, float]:
    """ "verb resource" -> n, summed by verb."""
    verbs: dict[str, float] = defaultdict(float)
    for key, n in per_resource.items():
        verbs[key.split(" ", 1)[0]] += n
    return dict(sorted(verbs.items(), key=lambda kv: -kv[1]))


def markdown(document: Obj) -> str:
    """The medians as one Markdown table (a row per setup), for the README."""
    head = (
        "| comparison | operator (client limits) | jobs/s | p50 / p95 s | requests/job (by verb) "
        "| watches open | CPU s/job | peak RSS MiB | deepest queue | load (1 min) |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    results = [derived(r) for r in document["results"]]
    for label, med in document["medians"].items():
        comparison, name = label.split(" / ", 1)
        runs = [r for r in results if r["comparison"] == comparison and r["setup"] == name]
        loads = [r["load_1min_at_start"] for r in runs]
        verbs = by_verb(med["requests_per_job_by_verb_resource"])
        verb_text = ", ".join(f"{v} {n:.1f}" for v, n in verbs.items() if n >= 0.05)
        cells = [
            comparison,
            f"{name}",
            _fmt(med["jobs_per_second"], "{:.2f}"),
            f"{_fmt(med['latency_p50'], '{:.1f}')} / {_fmt(med['latency_p95'], '{:.1f}')}",
            f"{_fmt(med['requests_per_job'], '{:.1f}')} ({verb_text})",
            _fmt(med["watches_open"], "{:.0f}"),
            _fmt(med["cpu_per_job"], "{:.3f}"),
            _fmt(med["operator_peak_rss_mib"], "{:.0f}"),
            _fmt(med["queue_depth_max"], "{:.0f}"),
            f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).with_name("results") / "operator_vs_upstream.json"
    parser.add_argument("results", nargs="?", type=Path, default=default, help="a results file")
    parser.add_argument("--markdown", action="store_true", help="the README's table of medians")
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text())
    print(markdown(document) if args.markdown else tables(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
