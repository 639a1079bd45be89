"""What the job subcommands share: common options, kubectl-like names and one-line summaries."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from trainop_core.errors import (
    InvalidJobError,
    InvalidNameError,
    NotFoundError,
    TerminalError,
    TrainopError,
)

if TYPE_CHECKING:  # the models import pydantic: not needed for `trainop --help`
    from trainop_core.api.job import TrainingJob
    from trainop_core.client import TrainingClient

GROUP = "kubeflow.org"
TRAINJOB = "TrainJob"  # Kubeflow Trainer v2 (trainop_core.runtimes), not imported for --help
TRAINER_GROUP = "trainer.kubeflow.org"
EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT = 0, 1, 2, 124


def add_runtimes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtimes",
        default=None,
        metavar="DIR",
        help="for a Kubeflow Trainer v2 TrainJob: a directory of TrainingRuntime / "
        "ClusterTrainingRuntime YAML files, searched before the defaults trainop ships "
        "(`trainop runtimes` lists them); default $TRAINOP_RUNTIMES. Neither is used with "
        "--backend kubernetes: there the TrainJob names a runtime the cluster holds",
    )


def add_backend_options(
    parser: argparse.ArgumentParser, *, namespace_help: str = "", decorators: bool = False
) -> None:
    parser.add_argument(
        "--backend",
        default="local",
        help="where jobs run: local (default; replicas are processes on this machine), "
        "kubernetes (the cluster of your kubeconfig; a TrainJob is stored as such, for an "
        "operator run with --enable-scheme TrainJob), ray (a Ray cluster: see --ray-address)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDRESS",
        help="with --backend ray: the cluster, host:port of its GCS or ray://host:10001 (Ray "
        "Client); default $RAY_ADDRESS, else the cluster `ray start` started on this machine; "
        "`run` starts a Ray of its own for its lifetime if there is none",
    )
    parser.add_argument(
        "--ray-files",
        choices=("upload", "shared"),
        default="upload",
        help="with --backend ray: upload the job file's directory to the cluster (default; "
        "without .git, virtualenvs and what .gitignore/.rayignore list; refused above "
        "$TRAINOP_RAY_UPLOAD_LIMIT, default 100Mi) or use the same path on every node (a "
        "shared filesystem)",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=None,
        help=namespace_help
        or "the job's namespace (default: the backend's: default locally, the kubeconfig "
        "context's on Kubernetes)",
    )
    if decorators:
        parser.add_argument(
            "--decorators",
            default=None,
            metavar="FILE",
            help="with --backend local or ray: the decorator configuration its pods get "
            "(DecoratorConfiguration YAML; default $TRAINOP_DECORATORS, else the installed "
            "pod-decorator plugins); on Kubernetes the operator's --decorators decides",
        )


def make_client(args: argparse.Namespace) -> TrainingClient:
    """The client for the backend options of `args` (see `add_backend_options`)."""
    from trainop_core.client import TrainingClient

    decorators = getattr(args, "decorators", None)
    if decorators and args.backend == "kubernetes":
        raise TerminalError(
            "--decorators: on Kubernetes the operator decorates pods (its own --decorators)"
        )
    options = {"decorators": decorators} if decorators else {}
    if args.backend != "ray":
        return TrainingClient(args.backend, **options)
    address = args.ray_address
    if address is None and getattr(args, "command", "") != "run":
        address = "auto"  # a Ray started here would end, and take the job with it, on exit
    return TrainingClient("ray", address=address, files=args.ray_files, **options)


class _StderrHandler(logging.Handler):
    """Writes to whatever sys.stderr is at the time (it may be replaced after setup)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr, flush=True)


def setup_logging() -> None:
    """Backend warnings (image not pulled, env skipped) go to stderr, once each."""
    logger = logging.getLogger("trainop")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("trainop: warning: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def resource(kind: str) -> str:
    """`pytorchjob.kubeflow.org`, as kubectl names a resource type ("job" if unknown)."""
    if kind == TRAINJOB:
        return f"{kind.lower()}.{TRAINER_GROUP}"
    return f"{kind.lower()}.{GROUP}" if kind else "job"


def report_error(err: TrainopError) -> int:
    """Print an error the kubectl way and return the exit code for it."""
    if isinstance(err, InvalidJobError):
        print(str(err), file=sys.stderr)
        return EXIT_INVALID
    if isinstance(err, NotFoundError):
        print(f"Error from server (NotFound): {err}", file=sys.stderr)
        return EXIT_FAILED
    if isinstance(err, InvalidNameError):
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    print(f"error: {err}", file=sys.stderr)
    return EXIT_INVALID if isinstance(err, TerminalError) else EXIT_FAILED


def replica_summary(job: TrainingJob) -> str:
    """`master 1/1 worker 2/2`: per replica type, replicas running or done / desired."""
    statuses = job.status.replica_statuses if job.status else {}
    parts = []
    for rtype, spec in job.spec.replica_specs.items():
        seen = statuses.get(rtype)
        done = (seen.active or 0) + (seen.succeeded or 0) if seen else 0
        parts.append(f"{rtype.lower()} {done}/{spec.replicas if spec.replicas is not None else 1}")
    return " ".join(parts)


def replica_detail(job: TrainingJob) -> str:
    """`master: 1 active; worker: 1 active, 1 succeeded`: every non-zero count."""
    statuses = job.status.replica_statuses if job.status else {}
    parts = []
    for rtype in job.spec.replica_specs:
        seen = statuses.get(rtype)
        counts = [
            f"{value} {label}"
            for label, value in (
                ("active", seen.active if seen else 0),
                ("succeeded", seen.succeeded if seen else 0),
                ("failed", seen.failed if seen else 0),
            )
            if value
        ]
        parts.append(f"{rtype.lower()}: {', '.join(counts) or 'starting'}")
    return "; ".join(parts)


def age(job: TrainingJob, now: datetime | None = None) -> str:
    """kubectl's AGE: 45s, 3m12s, 2h5m, 4d."""
    from trainop_core.progress import duration

    created = job.metadata.creation_timestamp
    if created is None:
        return "<unknown>"
    return duration(((now or datetime.now(timezone.utc)) - created).total_seconds())


def state_label(job: TrainingJob) -> str:
    from trainop_core.client import damage, supervisor_lost

    if damage(job):
        return "Damaged"
    state = display_state(job)
    return f"{state} (supervisor lost)" if supervisor_lost(job) else state


def listed_state(job: TrainingJob, queued: dict[str, str]) -> str:
    """The state a job list shows: Queued while a queue holds it (`queued`: the client's
    `queue_reasons`, by uid), else `state_label`."""
    return "Queued" if str(job.metadata.uid) in queued else state_label(job)


def queue_line(job: TrainingJob, queued: dict[str, str]) -> str:
    """Why a queue holds the job, on one line: Kueue's reason from the job's Workload on
    Kubernetes, the local queue's on this machine; "" when no queue holds it."""
    from trainop_core.client import queue_message

    reason = queued.get(str(job.metadata.uid)) or queue_message(job)
    return " ".join(reason.split())


def display_state(job: TrainingJob) -> str:
    """The state a person reads: a TrainJob's as Trainer names it (Complete, not Succeeded)."""
    from trainop_core.client import job_state

    if job.kind == TRAINJOB:
        from trainop_core.runtimes.status import trainjob_state

        return trainjob_state(job)
    return job_state(job)


def warn_damaged(jobs: list[TrainingJob]) -> None:
    """One stderr line per job whose stored state is damaged: what is wrong, how to remove it."""
    from trainop_core.client import damage

    for job in jobs:
        if damage(job):
            print(f"trainop: warning: {damage(job)}", file=sys.stderr)


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
