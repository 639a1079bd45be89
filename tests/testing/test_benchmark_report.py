"""benchmarks/report.py's derived figures: whether the operator's memory grows with the jobs it
has finished (issue 36's "RSS must stay flat") is a slope over the run's second half."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import report

sys.path.pop(0)


def run(rss_of_done: list[tuple[float, float]], jobs: int = 10_000) -> dict:
    """A result whose samples at t = 0, 10, ... had (jobs done, RSS MiB) as given."""
    return {
        "jobs": jobs,
        "done_samples": [[10 * i, n] for i, (n, _) in enumerate(rss_of_done)],
        "operator_rss_samples": [[10 * i, mib] for i, (_, mib) in enumerate(rss_of_done)],
    }


def test_memory_that_grows_with_the_jobs_done_shows_as_its_rate() -> None:
    # caches fill over the first half, then 2 MiB more for every 1,000 jobs
    first = [(n, 40 + n / 250) for n in range(0, 5000, 500)]
    second = [(n, 60 + 2 * (n - 5000) / 1000) for n in range(5000, 10_001, 500)]
    assert report.rss_growth(run(first + second)) == pytest.approx(2.0)


def test_flat_memory_is_zero_whatever_the_first_half_did() -> None:
    samples = [(n, 30 + n / 100) for n in range(0, 5000, 500)]  # steep while filling
    samples += [(n, 80.0 + (0.5 if n % 1000 else -0.5)) for n in range(5000, 10_001, 500)]
    assert report.rss_growth(run(samples)) == pytest.approx(0.0, abs=0.1)


def test_too_few_samples_or_no_jobs_done_give_no_figure() -> None:
    assert report.rss_growth(run([(0, 50.0), (6000, 60.0), (7000, 61.0)][:2])) is None
    assert report.rss_growth(run([(6000, 60.0)] * 5)) is None  # nothing finished meanwhile
    assert report.rss_growth({"jobs": 10}) is None  # a run that sampled nothing
    # a sample of RSS without a jobs-done sample at the same time is not paired
    lone = run([(n, 50.0 + n / 1000) for n in range(5000, 10_001, 1000)])
    lone["done_samples"] = []
    assert report.rss_growth(lone) is None


def test_the_figure_is_in_the_tables() -> None:
    samples = [(n, 50.0 + 3 * n / 1000) for n in range(0, 10_001, 1000)]
    result = {
        **run(samples),
        "jobs_per_second": 4.0,
        "operator_cpu_seconds": 100.0,
        "wall_seconds": 2500.0,
        "requests": {"create pods": 50_000},
        "server_cpu_seconds": {"kube-apiserver": 2000.0, "etcd": 400.0},
        "comparison": "v1.9",
        "setup": "trainop",
        "round": 1,
        "limits": {"qps": 500, "burst": 1000},
    }
    derived = report.derived(result)
    assert derived["rss_growth_per_1000_jobs"] == pytest.approx(3.0)
    assert derived["control_plane_cpu_per_job"] == pytest.approx(0.24)
    text = report.tables({"results": [result]})
    assert "RSS growth per 1,000 jobs done, 2nd half (MiB)" in text
    assert "3.00" in text.split("RSS growth per 1,000 jobs done")[1].splitlines()[0]
    assert report.one_line(
        {**result, "succeeded": 10, "latency_p50": 5.0, "requests_per_job": 20.0,
         "operator_peak_rss_mib": 80.0, "queue_depth_max": 0, "load_1min_at_start": 1.0}
    ).endswith("RSS +3.00 MiB per 1,000 jobs done (2nd half)")  # fmt: skip
