"""`trainop get [NAME]`: a kubectl-like table of jobs, or whole jobs as YAML/JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from trainop_core.cli._output import (
    EXIT_OK,
    add_backend_options,
    age,
    listed_state,
    make_client,
    queue_line,
    replica_summary,
    report_error,
    table,
    warn_damaged,
)
from trainop_core.errors import TrainopError

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "get",
        help="list jobs or show one",
        description=(
            "Without NAME, list the jobs of the namespace (-A: of every namespace) as a table: "
            "NAME, KIND, STATE (the newest true condition), PROGRESS and ETA (what the job's "
            "primary replica last reported as progressPercentage and estimatedRemainingSeconds, "
            "Kubeflow Trainer's trainerStatus; empty when it reported none), AGE and REPLICAS "
            "(per replica type, running or succeeded / desired), and MESSAGE when a job is "
            "Queued: why its queue "
            "holds it (Kueue's reason on Kubernetes, the local queue's here: see `trainop queue`). "
            "With NAME, that job only. -o yaml|json prints "
            "the jobs with their status (a TrainJob as Trainer's API stores it: apply it again as "
            "it is). A job whose stored state is damaged is listed as Damaged, "
            "with what is wrong on stderr. Exit codes: 0, 1 no such job, 2 invalid name."
        ),
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="job name")
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="list jobs of every namespace"
    )
    parser.add_argument(
        "-o", "--output", choices=("table", "yaml", "json"), default="table", help="format"
    )
    add_backend_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        client = make_client(args)
        namespace = args.namespace or client.default_namespace
        if args.name:
            jobs = [client.get(args.name, namespace)]
        else:
            jobs = client.list(None if args.all_namespaces else namespace)
    except TrainopError as err:
        return report_error(err)
    if not jobs:
        where = "any namespace" if args.all_namespaces else f"{namespace} namespace"
        print(f"No resources found in {where}.", file=sys.stderr)
        return EXIT_OK
    warn_damaged(jobs)
    try:
        queued = client.queue_reasons(jobs) if args.output == "table" else {}
    except TrainopError as err:
        return report_error(err)
    print(_render(jobs, args.output, args.all_namespaces and not args.name, queued))
    return EXIT_OK


def _render(
    jobs: list[TrainingJob], output: str, with_namespace: bool, queued: dict[str, str]
) -> str:
    from trainop_core.api.load import dump_json, dump_yaml, to_wire

    if output == "yaml":
        return dump_yaml(jobs).rstrip()
    if output == "json":
        if len(jobs) == 1:
            return dump_json(jobs[0]).rstrip()
        items = [to_wire(job) for job in jobs]
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
    from trainop_core.progress import cells

    header = ["NAME", "KIND", "STATE", "PROGRESS", "ETA", "AGE", "REPLICAS"]
    rows = [
        [job.name, job.kind, listed_state(job, queued), *cells(job), age(job), replica_summary(job)]
        for job in jobs
    ]
    messages = [queue_line(job, queued) for job in jobs]
    if any(messages):
        header.append("MESSAGE")
        rows = [[*row, message] for row, message in zip(rows, messages, strict=True)]
    if with_namespace:
        header = ["NAMESPACE", *header]
        rows = [[job.namespace, *row] for job, row in zip(jobs, rows, strict=True)]
    return table([header, *rows])
