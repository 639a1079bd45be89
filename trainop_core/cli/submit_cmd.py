"""`trainop submit FILE`: create the job and return at once; it runs on without this process."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainop_core.cli._output import (
    EXIT_OK,
    add_backend_options,
    make_client,
    report_error,
    resource,
    setup_logging,
)
from trainop_core.errors import TrainopError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "submit",
        help="start a job and return at once",
        description=(
            "Validate FILE (one job of any kind: TFJob, MPIJob, ...) and start it. Returns as "
            "soon as the job exists; follow it with `trainop get`, `trainop logs -f`. Exit codes: "
            "0 created, 2 invalid file or name taken (nothing was started)."
        ),
    )
    parser.add_argument("file", type=Path, help="the job's YAML or JSON file")
    add_backend_options(parser, namespace_help="create the job in this namespace", decorators=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        job = make_client(args).create(args.file, namespace=args.namespace)
    except TrainopError as err:
        return report_error(err)
    print(f"{resource(job.kind)}/{job.name} created")
    return EXIT_OK
