"""Prometheus metrics, written by hand in the text exposition format (version 0.0.4).

A small registry (counters, gauges, histograms with labels) is enough here and keeps the operator
free of a `prometheus_client` dependency. `OperatorMetrics` declares every metric the operator
exports, with controller-runtime's and upstream training-operator's names.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence

LabelKey = tuple[str, ...]

# controller-runtime's reconcile-time buckets (seconds).
RECONCILE_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
    1.25,
    1.5,
    1.75,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    6.0,
    7.0,
    8.0,
    9.0,
    10.0,
    15.0,
    20.0,
    25.0,
    30.0,
    40.0,
    50.0,
    60.0,
)
# client-go workqueue buckets: 1 ns .. 10 s, powers of ten.
WORKQUEUE_BUCKETS = tuple(10.0**e for e in range(-8, 2))
# Job durations: a minute to a week.
JOB_DURATION_BUCKETS = (
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    28800.0,
    86400.0,
    259200.0,
    604800.0,
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)) + "}"


def _format_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else str(int(value))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Sequence[str]) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> LabelKey:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    """A monotonically increasing value per label set."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [
            f"{self.name}{_format_labels(self.label_names, k)} {_format_value(v)}" for k, v in items
        ]


class Gauge(Counter):
    """A value that goes up and down per label set."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = value

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)

    def reset(self) -> None:
        with self._lock:
            self._values.clear()


class Histogram(_Metric):
    """Cumulative buckets plus `_sum` and `_count` per label set."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Iterable[float] = RECONCILE_BUCKETS,
    ) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = (*sorted(buckets), math.inf)
        self._counts: dict[LabelKey, list[int]] = {}
        self._sums: dict[LabelKey, float] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts = self._counts.setdefault(key, [0] * len(self.buckets))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[i] += 1
            self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, **labels: str) -> int:
        with self._lock:
            counts = self._counts.get(self._key(labels))
            return counts[-1] if counts else 0

    def samples(self) -> list[str]:
        lines: list[str] = []
        names = (*self.label_names, "le")
        with self._lock:
            for key in sorted(self._counts):
                for bound, n in zip(self.buckets, self._counts[key], strict=True):
                    labels = _format_labels(names, (*key, _format_value(bound)))
                    lines.append(f"{self.name}_bucket{labels} {n}")
                labels = _format_labels(self.label_names, key)
                lines.append(f"{self.name}_sum{labels} {_format_value(self._sums[key])}")
                lines.append(f"{self.name}_count{labels} {self._counts[key][-1]}")
        return lines


class Registry:
    """The metrics one process exports; `render()` is the /metrics body."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}

    def register(self, metric: _Metric) -> None:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        metric = Counter(name, help_text, labels)
        self.register(metric)
        return metric

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        metric = Gauge(name, help_text, labels)
        self.register(metric)
        return metric

    def histogram(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Iterable[float] = RECONCILE_BUCKETS,
    ) -> Histogram:
        metric = Histogram(name, help_text, labels, buckets)
        self.register(metric)
        return metric

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines += metric.header() + metric.samples()
        return "\n".join(lines) + "\n"


JOB = ("job_namespace", "framework")


class OperatorMetrics:
    """Every metric the operator exports, registered on one fresh registry."""

    def __init__(self, registry: Registry | None = None) -> None:
        r = self.registry = registry or Registry()
        self.jobs_created = r.counter(
            "training_operator_jobs_created_total", "Counts number of jobs created", JOB
        )
        self.jobs_deleted = r.counter(
            "training_operator_jobs_deleted_total", "Counts number of jobs deleted", JOB
        )
        self.jobs_successful = r.counter(
            "training_operator_jobs_successful_total", "Counts number of jobs successful", JOB
        )
        self.jobs_failed = r.counter(
            "training_operator_jobs_failed_total", "Counts number of jobs failed", JOB
        )
        self.jobs_restarted = r.counter(
            "training_operator_jobs_restarted_total", "Counts number of jobs restarted", JOB
        )
        self.jobs_running = r.gauge(
            "training_operator_jobs_running", "Jobs whose last condition is Running", JOB
        )
        self.jobs_pending = r.gauge(
            "training_operator_jobs_pending", "Jobs created but not yet running or finished", JOB
        )
        self.job_duration = r.histogram(
            "training_operator_job_duration_seconds",
            "Seconds from job start to completion",
            (*JOB, "state"),
            JOB_DURATION_BUCKETS,
        )
        self._controller_metrics(r)
        self._workqueue_metrics(r)
        self.rest_requests = r.counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by verb and code",
            ("verb", "code"),
        )
        self.leader = r.gauge(
            "leader_election_master_status", "1 while this process holds the lease", ("name",)
        )
        self._decorator_metrics(r)
        self._progress_metrics(r)

    def _progress_metrics(self, r: Registry) -> None:
        self.progress_reads = r.counter(
            "trainop_progress_log_reads_total",
            "Reads of a primary pod's log for training progress, by result",
            ("result",),
        )
        self.progress_writes = r.counter(
            "trainop_progress_writes_total",
            "Writes of a job's training progress (annotation or trainerStatus), by result",
            ("result",),
        )
        self.progress_dropped = r.counter(
            "trainop_progress_dropped_total",
            "Progress output left out (nan, out of range, too long, flood, ...), by reason",
            ("reason",),
        )
        self.progress_followed = r.gauge(
            "trainop_progress_followed_jobs", "Jobs whose primary pod's log is followed"
        )

    def _decorator_metrics(self, r: Registry) -> None:
        server = ("server",)
        self.decorator_requests = r.counter(
            "trainop_decorator_requests_total", "Calls to each decorator server", server
        )
        self.decorator_latency = r.histogram(
            "trainop_decorator_request_duration_seconds",
            "Seconds from sending a decoration review to its answer (or its failure)",
            server,
        )
        self.decorator_failures = r.counter(
            "trainop_decorator_failures_total",
            "Decorator answers that could not be used, or refusals, by reason",
            ("server", "reason"),
        )

    def _controller_metrics(self, r: Registry) -> None:
        self.reconcile_total = r.counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ("controller", "result"),
        )
        self.reconcile_errors = r.counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ("controller",),
        )
        self.reconcile_time = r.histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ("controller",),
        )

    def _workqueue_metrics(self, r: Registry) -> None:
        name = ("name",)
        self.wq_depth = r.gauge("workqueue_depth", "Current depth of workqueue", name)
        self.wq_adds = r.counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", name
        )
        self.wq_queue_duration = r.histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            name,
            WORKQUEUE_BUCKETS,
        )
        self.wq_work_duration = r.histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            name,
            WORKQUEUE_BUCKETS,
        )
        self.wq_retries = r.counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", name
        )
