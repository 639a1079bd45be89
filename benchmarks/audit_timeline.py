"""Where an admitted job's time goes, read from kube-apiserver's audit log (`audit.audit_flags`).

For each job, the server's own timestamps of the writes between Kueue's unsuspend and the
operator's Running status (the kubelet stand-in writes one binding and three status patches per
pod: accept, run, exit; the second is the pod's Running):

- ``to_first_write``: the unsuspend's answer to the operator's first write for the job (its
  informer, queue and planning: the operator's reaction time);
- ``status_before_pods``: from that first write to the first pod create's request when the
  operator wrote the job's status first (zero when pods came first);
- ``to_first_pod`` / ``to_last_pod``: the unsuspend to the first and the last pod created;
- ``pods_to_running_write``: the last pod's Running patch to the operator's next status write
  (how long the operator waited to notice that every pod runs).

With ``kueue_latency.py --audit`` each job's points in time are kept too (`job_timeline`, and
when the benchmark's own watch saw the job admitted and Running); ``--results`` prints, per setup,
p50/p95/max of each step between consecutive points, so the admission-to-Running the benchmark
reports is split into the operator's, the API server's and the kubelet stand-in's parts.

    PYTHONPATH=. python benchmarks/audit_timeline.py AUDIT_LOG OPERATOR_USER
    PYTHONPATH=. python benchmarks/audit_timeline.py --results RESULTS_JSON
    PYTHONPATH=. python benchmarks/audit_timeline.py --resume-writes AUDIT_LOG...

``--resume-writes`` prints, per audit log, how long each resumed job's writes held the worker:
from its first pod create to the answer of the last of its Services and its status write.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

JOB_RESOURCES = ("pytorchjobs", "tfjobs", "xgboostjobs", "mxjobs")
WRITES = ("create", "update", "patch")
PHASES = (
    "to_first_write",
    "status_before_pods",
    "to_first_pod",
    "to_last_pod",
    "pods_to_running_write",
)


@dataclass(frozen=True)
class Write:
    user: str
    verb: str
    resource: str
    subresource: str
    name: str
    received: float
    completed: float


@dataclass
class JobWrites:
    job: list[Write] = field(default_factory=list)  # to the job (spec or status)
    pods: list[Write] = field(default_factory=list)  # pod creates and pods/status patches


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def read_writes(path: Path, resources: tuple[str, ...] = (*JOB_RESOURCES, "pods")) -> list[Write]:
    """Every completed write to a job or a pod (or to `resources`), in the order the server
    answered them."""
    writes = []
    with path.open("rb") as handle:
        for line in handle:
            event: dict[str, Any] = json.loads(line)
            ref = event.get("objectRef") or {}
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITES:
                continue
            if ref.get("resource") not in resources or not ref.get("name"):
                continue
            if (event.get("responseStatus") or {}).get("code", 200) >= 300:
                continue
            writes.append(
                Write(
                    user=str((event.get("user") or {}).get("username", "")),
                    verb=str(event["verb"]),
                    resource=str(ref["resource"]),
                    subresource=str(ref.get("subresource", "")),
                    name=str(ref["name"]),
                    received=_seconds(event["requestReceivedTimestamp"]),
                    completed=_seconds(event["stageTimestamp"]),
                )
            )
    return sorted(writes, key=lambda w: w.completed)


def by_job(writes: list[Write], jobs: set[str]) -> dict[str, JobWrites]:
    """Group writes by job name; a pod belongs to the job its name starts with."""
    grouped: dict[str, JobWrites] = defaultdict(JobWrites)
    for write in writes:
        if write.resource == "pods":
            owner = next((j for j in jobs if write.name.startswith(f"{j}-")), None)
            if owner is not None:
                grouped[owner].pods.append(write)
        elif write.name in jobs:
            grouped[write.name].job.append(write)
    return grouped


def job_phases(writes: JobWrites, operator: str) -> dict[str, float] | None:
    """The phases of one job (see the module docstring), None when its timeline is incomplete:
    differences between the points of its `job_timeline`."""
    points = job_timeline(writes, operator)
    if points is None:
        return None
    admitted = points["unsuspended"]
    return {
        "to_first_write": points["first_write"] - admitted,
        "status_before_pods": max(0.0, points["first_pod_sent"] - points["first_write"]),
        "to_first_pod": points["first_pod"] - admitted,
        "to_last_pod": points["last_pod"] - admitted,
        "pods_to_running_write": points["running_write_sent"] - points["pods_running"],
    }


def job_timeline(writes: JobWrites, operator: str) -> dict[str, float] | None:
    """One job's points in time (the server's clocks, seconds since the epoch), None when its
    timeline is incomplete: the unsuspend answered, the operator's first write received, the
    first pod sent, the first and last pod created, the last binding, the last pod patched
    Running, and the operator's first status write after that (received, answered)."""
    creates = [w for w in writes.pods if w.verb == "create" and w.user == operator]
    unsuspends = [
        w for w in writes.job
        if w.verb != "create" and w.user != operator and not w.subresource
        and creates and w.completed <= creates[0].received
    ]  # fmt: skip
    bindings = [w for w in writes.pods if w.subresource == "binding"]
    if not creates or not unsuspends or not bindings:
        return None
    admitted = unsuspends[-1].completed
    own = [w for w in [*writes.job, *creates] if w.user == operator and w.received >= admitted]
    running = _pods_running(writes.pods, operator)
    after = [
        w for w in writes.job
        if w.user == operator and w.subresource == "status" and w.received >= running
    ]  # fmt: skip
    if not after:
        return None
    return {
        "unsuspended": admitted,
        "first_write": min(w.received for w in own),
        "first_pod_sent": creates[0].received,
        "first_pod": creates[0].completed,
        "last_pod": creates[-1].completed,
        "last_bound": max(w.completed for w in bindings),
        "pods_running": running,
        "running_write_sent": after[0].received,
        "running_written": after[0].completed,
    }


def timelines(path: Path, jobs: set[str], operator: str) -> dict[str, dict[str, float]]:
    """job name -> its `job_timeline`, for the jobs whose timeline is complete."""
    out = {}
    for name, writes in by_job(read_writes(path), jobs).items():
        points = job_timeline(writes, operator)
        if points is not None:
            out[name] = points
    return out


def _pods_running(pods: list[Write], operator: str) -> float:
    """When the last of the job's pods was patched Running (its second status patch)."""
    patches: dict[str, list[float]] = defaultdict(list)
    for write in pods:
        if write.subresource == "status" and write.user != operator:
            patches[write.name].append(write.completed)
    return max(times[1] for times in patches.values() if len(times) > 1)


def summary(path: Path, jobs: set[str], operator: str) -> dict[str, Any]:
    """p50/p95 of each phase over `jobs`, and how many jobs had a complete timeline."""
    phases = [
        p
        for p in (job_phases(w, operator) for w in by_job(read_writes(path), jobs).values())
        if p is not None
    ]
    out: dict[str, Any] = {"jobs": len(phases)}
    for name in PHASES:
        values = sorted(p[name] for p in phases)
        if values:
            p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
            out[name] = {"p50": statistics.median(values), "p95": p95}
    return out


POINTS = (
    "watch_admitted",
    "unsuspended",
    "first_write",
    "first_pod",
    "last_pod",
    "last_bound",
    "pods_running",
    "running_write_sent",
    "running_written",
    "watch_running",
)


def steps(results: list[dict[str, Any]]) -> str:
    """A table of each step between consecutive `POINTS` (ms, p50 / p95 / max over the jobs),
    one column per setup of a kueue_latency.py results file."""
    pairs = [*itertools.pairwise(POINTS), (POINTS[0], POINTS[-1])]
    columns, header = [], ["step (ms, p50 / p95 / max)"]
    for result in results:
        timelines = list((result.get("timelines") or {}).values())
        header.append(f"{result['operator']} r{result['round']} ({len(timelines)} jobs)")
        column = []
        for before, after in pairs:
            values = sorted(1000 * (t[after] - t[before]) for t in timelines)
            if not values:
                column.append("-")
                continue
            p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
            column.append(f"{statistics.median(values):.0f} / {p95:.0f} / {values[-1]:.0f}")
        columns.append(column)
    names = [f"{b} -> {a}" for b, a in pairs]
    rows = [header, *([name, *(c[i] for c in columns)] for i, name in enumerate(names))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(lines)


def resume_writes(path: Path) -> list[float]:
    """Per job, seconds from the operator's first pod create after Kueue's unsuspend (its
    request) to the answer of the last write of that reconcile: its Services and its first status
    write. How long the one worker is held by a resumed job's writes."""
    writes = read_writes(path, (*JOB_RESOURCES, "pods", "services"))
    creates = [
        w for w in writes if w.resource == "pods" and w.verb == "create" and not w.subresource
    ]
    if not creates:
        return []
    operator = creates[0].user
    spans = []
    for name in {w.name for w in writes if w.resource in JOB_RESOURCES}:
        own = [w for w in writes if w.name == name or w.name.startswith(f"{name}-")]
        pods = [w for w in own if w in creates]
        if not pods:
            continue
        start = pods[0].received
        unsuspends = [
            w for w in own
            if w.resource in JOB_RESOURCES and w.user != operator and w.verb != "create"
            and not w.subresource and w.completed <= start
        ]  # fmt: skip
        status = [w for w in own if w.subresource == "status" and w.user == operator
                  and w.resource in JOB_RESOURCES and w.received >= start]  # fmt: skip
        services = [w for w in own if w.resource == "services" and w.user == operator
                    and unsuspends and w.received >= unsuspends[-1].completed]  # fmt: skip
        if unsuspends and status and services:
            spans.append(max(status[0].completed, *(w.completed for w in services)) - start)
    return sorted(spans)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Give AUDIT_LOG and OPERATOR_USER, or --results, or --resume-writes.",
    )
    add = parser.add_argument
    add("audit_log", nargs="?", type=Path, metavar="AUDIT_LOG",
        help="kube-apiserver's audit log: print each step's p50/p95/max as JSON")  # fmt: skip
    add("operator", nargs="?", metavar="OPERATOR_USER",
        help="the user the operator's requests are made as")  # fmt: skip
    mode = parser.add_mutually_exclusive_group()
    per_setup = "a kueue_latency.py --audit --json file: the steps per setup"
    mode.add_argument("--results", type=Path, metavar="RESULTS_JSON", help=per_setup)
    writes = "per audit log, how long each resumed job's writes held the worker"
    mode.add_argument("--resume-writes", nargs="+", type=Path, metavar="AUDIT_LOG", help=writes)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.results:
        print(steps(json.loads(args.results.read_text())["results"]))
        return 0
    if args.resume_writes:
        for log in args.resume_writes:
            spans = [1000 * s for s in resume_writes(log)]
            p95 = spans[min(len(spans) - 1, round(0.95 * (len(spans) - 1)))] if spans else 0.0
            median = statistics.median(spans) if spans else 0.0
            print(f"{log}: {len(spans)} jobs, p50 {median:.0f} ms, p95 {p95:.0f} ms")
        return 0
    if args.audit_log is None or args.operator is None:
        parser.error("give AUDIT_LOG and OPERATOR_USER, or --results, or --resume-writes")
    jobs = {w.name for w in read_writes(args.audit_log) if w.resource in JOB_RESOURCES}
    print(json.dumps(summary(args.audit_log, jobs, args.operator), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
