"""What the page shows, made from what `TrainingClient` returns. Pure: no I/O, no state.

Every value is plain JSON data the page puts in the document as text; nothing here is markup.
The job list's columns are `trainop get`'s (the same helpers), so the two always agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.backends.base import JobEvent, LogLine
from trainop_core.cli._output import age, listed_state, queue_line, replica_summary
from trainop_core.planner.types import ObservedPod
from trainop_core.progress import cells
from trainop_core.report import parse_metrics

MAX_LINE_CHARS = 4096  # a longer log line is shown cut, with a marker
CUT_MARK = " [... cut by trainop ui]"
MAX_METRICS = 24  # metric names per metric stream (and charts per job page): the first ones seen


def job_progress(job: TrainingJob) -> str | None:
    """The PROGRESS the page shows for `job` ("42% ETA 3m0s" or the like), None when the job
    reports none: the same facts as `trainop get`'s PROGRESS and ETA cells (the job's Trainer
    status, see docs/progress.md); the page shows the column only when some job has one."""
    percent, eta = cells(job)
    text = " ".join(part for part in (percent, f"ETA {eta}" if eta else "") if part)
    return text or None


def job_row(job: TrainingJob, queued: dict[str, str]) -> dict[str, Any]:
    """One line of the job list (`trainop get`'s columns, plus labels to filter on)."""
    return {
        "namespace": job.namespace,
        "name": job.name,
        "kind": job.kind,
        "state": listed_state(job, queued),
        "age": age(job),
        "created": _time(job.metadata.creation_timestamp),
        "replicas": replica_summary(job),
        "progress": job_progress(job),
        "message": queue_line(job, queued),
        "labels": dict(job.metadata.labels or {}),
    }


def job_rows(jobs: Sequence[TrainingJob], queued: dict[str, str]) -> list[dict[str, Any]]:
    return [job_row(job, queued) for job in jobs]


def job_detail(
    job: TrainingJob,
    queued: dict[str, str],
    replica_ids: list[str],
    pods: Sequence[ObservedPod],
    events: Sequence[JobEvent],
) -> dict[str, Any]:
    """Everything the job's page shows but its log and metrics."""
    wire = job.to_dict()
    status = wire.get("status") or {}
    return {
        **job_row(job, queued),
        "uid": str(job.metadata.uid or ""),
        "annotations": dict(job.metadata.annotations or {}),
        "conditions": [_condition(c) for c in status.get("conditions") or []],
        "replicaStatuses": status.get("replicaStatuses") or {},
        "replicaIds": replica_ids,
        "pods": [_pod(pod) for pod in pods],
        "events": [asdict(event) for event in events],
    }


def log_line(line: LogLine) -> list[str]:
    """[replica, text] with the text cut at MAX_LINE_CHARS: the page holds a bounded amount."""
    text = line.text
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + CUT_MARK
    return [line.replica, text]


def metric_points(lines: Iterable[LogLine]) -> Iterable[dict[str, Any]]:
    """The metric lines among `lines` (trainop_core.report's `name=value` format, as the trial
    runner and the KFP component read them) as points: replica, step (None if not printed),
    values. Only the first MAX_METRICS metric names seen are kept (the set of names is all this
    holds): a replica printing thousands of names makes no more; a point left empty is dropped."""
    names: set[str] = set()
    for line in lines:
        record = parse_metrics(line.text)
        if record is None:
            continue
        values = {}
        for key, value in record.values.items():
            if len(names) < MAX_METRICS and math.isfinite(value):
                names.add(key)
            if key in names and math.isfinite(value):
                values[key] = value
        if values:
            yield {"replica": line.replica, "step": record.step, "values": values}


def study_json(study: Any, namespace: str) -> dict[str, Any]:
    """A trainop_hpo.study.Study as the study page shows it (`namespace`: of the trials' jobs
    when the study does not say: the client's default)."""
    info = study.info
    return {
        **study_info_json(info),
        "namespace": info.namespace or namespace,
        "trials": [
            {
                "id": t.summary.trial_id,
                "job": t.job_name,
                "params": {k: _plain(v) for k, v in t.summary.params.items()},
                "metric": t.summary.metric,
                "state": t.summary.state,
                "best": t.summary.best,
                "reason": t.summary.reason,
                "history": [list(point) for point in t.history],
            }
            for t in study.trials
        ],
    }


def study_info_json(info: Any) -> dict[str, Any]:
    return {
        "name": info.name,
        "metric": info.metric,
        "mode": info.mode,
        "kind": info.kind,
        "template": info.template,
        "params": dict(info.params),
        "started": info.started,
    }


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def _condition(condition: dict[str, Any]) -> dict[str, str]:
    keys = ("type", "status", "reason", "message", "lastTransitionTime")
    return {key: str(condition.get(key) or "") for key in keys}


def _pod(pod: ObservedPod) -> dict[str, Any]:
    return {
        "replica": f"{pod.replica_type.lower()}-{pod.index}",
        "name": pod.name,
        "phase": pod.phase,
        "restarts": pod.restart_count,
        "exitCode": pod.exit_code,
        "reason": pod.reason,
        "message": pod.message,
    }


def _time(value: Any) -> str:
    return value.isoformat() if value is not None else ""
