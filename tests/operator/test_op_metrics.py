"""The hand-written Prometheus registry renders the text exposition format."""

from __future__ import annotations

import pytest

from trainop_core.operator.metrics import OperatorMetrics, Registry


def test_counters_render_with_help_type_and_escaped_labels() -> None:
    registry = Registry()
    c = registry.counter("x_total", "Some help", ("a",))
    c.inc(a='q"uote\\')
    c.inc(2, a='q"uote\\')
    assert registry.render() == (
        '# HELP x_total Some help\n# TYPE x_total counter\nx_total{a="q\\"uote\\\\"} 3\n'
    )


def test_histograms_have_cumulative_buckets_sum_and_count() -> None:
    registry = Registry()
    h = registry.histogram("d_seconds", "Durations", ("c",), buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 5.0):
        h.observe(value, c="x")
    lines = registry.render().splitlines()
    assert 'd_seconds_bucket{c="x",le="0.1"} 1' in lines
    assert 'd_seconds_bucket{c="x",le="1"} 2' in lines
    assert 'd_seconds_bucket{c="x",le="+Inf"} 3' in lines
    assert 'd_seconds_sum{c="x"} 5.55' in lines
    assert 'd_seconds_count{c="x"} 3' in lines


def test_wrong_labels_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        OperatorMetrics().jobs_created.inc(job_namespace="default")


def test_every_promised_metric_is_declared() -> None:
    text = OperatorMetrics().registry.render()
    for name in (
        "training_operator_jobs_created_total",
        "training_operator_jobs_deleted_total",
        "training_operator_jobs_successful_total",
        "training_operator_jobs_failed_total",
        "training_operator_jobs_restarted_total",
        "training_operator_job_duration_seconds",
        "training_operator_jobs_running",
        "training_operator_jobs_pending",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_retries_total",
        "rest_client_requests_total",
    ):
        assert f"# TYPE {name} " in text
