"""`trainop submit FILE`: create the job and return at once; it runs on without this process."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainop_core.cli._output import (
    EXIT_OK,
    add_backend_options,
    make_client,
    report_error,
    resource,
    setup_logging,
)
from trainop_core.errors import InvalidJobError, Problem, TrainopError

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "submit",
        help="start a job and return at once",
        description=(
            "Validate FILE (one job of any kind: TFJob, MPIJob, ..., or a Kubeflow Trainer v2 "
            "TrainJob, checked with its runtime: on --backend kubernetes the cluster's) and "
            "start it. Returns as "
            "soon as the job exists; follow it with `trainop get`, `trainop logs -f`. Exit codes: "
            "0 created, 2 invalid file or name taken (nothing was started)."
        ),
    )
    parser.add_argument("file", type=Path, help="the job's YAML or JSON file")
    parser.add_argument(
        "--queue",
        metavar="NAME",
        help="set the label kueue.x-k8s.io/queue-name: NAME (replacing the file's): the job "
        "waits in queue NAME (locally: `trainop queue`; on Kubernetes: Kueue's LocalQueue NAME, "
        "for a TrainJob too) until it has room for the job's requests",
    )
    add_backend_options(parser, namespace_help="create the job in this namespace", decorators=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        client = make_client(args)
        if args.queue is None:
            job = client.create(args.file, namespace=args.namespace)
        else:
            queued, workdir = _queued(args.file, args.queue, args.namespace)
            job = client.create(queued, namespace=args.namespace, workdir=workdir)
    except TrainopError as err:
        return report_error(err)
    print(f"{resource(job.kind)}/{job.name} created")
    return EXIT_OK


def _queued(
    path: Path, queue: str, namespace: str | None
) -> tuple[TrainingJob | dict[str, Any], Path]:
    """The job of `path` carrying the queue label, and the directory its paths resolve in. A
    TrainJob is labelled as written (each backend then checks it against its own runtimes;
    Kueue's TrainJob integration reads the same label)."""
    from trainop_core.api.load import read_documents
    from trainop_core.backends.local.queueing import QUEUE_LABEL, is_queue_name
    from trainop_core.client import prepare_source
    from trainop_core.runtimes.prepare import v2_document

    if not is_queue_name(queue):
        problem = Problem("--queue", f"{queue[:70]!r}: expected a queue name (a DNS label)")
        raise InvalidJobError([problem])
    trainjob = v2_document(read_documents(path))
    if trainjob is not None:
        return _labelled(trainjob.data, QUEUE_LABEL, queue), path.resolve().parent
    _, job, workdir = prepare_source(path, namespace)
    job.metadata.labels = {**(job.metadata.labels or {}), QUEUE_LABEL: queue}
    return job, workdir


def _labelled(data: dict[str, Any], label: str, value: str) -> dict[str, Any]:
    """A copy of `data` whose metadata carries the label (metadata or labels that are not
    mappings are left for the job's validation to name)."""
    data = copy.deepcopy(data)
    meta = data.setdefault("metadata", {})
    if isinstance(meta, dict) and isinstance(meta.get("labels") or {}, dict):
        meta["labels"] = {**(meta.get("labels") or {}), label: value}
    return data
