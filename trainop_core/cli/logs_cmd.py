"""`trainop logs NAME`: replicas' output, prefixed by replica unless one is chosen."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainop_core.cli._output import (
    EXIT_INVALID,
    EXIT_OK,
    add_backend_options,
    make_client,
    report_error,
    setup_logging,
    warn_damaged,
)
from trainop_core.errors import TrainopError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "logs",
        help="print a job's replica logs",
        description=(
            "Print what the job's replicas wrote (stdout and stderr), each line prefixed with "
            "its replica (`worker-1 | ...`); with --replica only that replica's lines, "
            "unprefixed. Restarts are marked by `--- trainop: ... ---` lines."
        ),
    )
    parser.add_argument("name", metavar="NAME", help="job name")
    parser.add_argument(
        "--replica", "-r", default=None, help="only this replica, e.g. master-0 or worker-1"
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the job has finished"
    )
    parser.add_argument(
        "--tail",
        type=int,
        default=None,
        metavar="N",
        help="start at each replica's last N lines (the earlier ones are not read)",
    )
    add_backend_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        client = make_client(args)
        namespace = args.namespace or client.default_namespace
        warn_damaged([client.get(args.name, namespace)])
        if args.tail is not None and args.tail < 0:
            print(f"error: --tail must not be negative, got {args.tail}", file=sys.stderr)
            return EXIT_INVALID
        for line in client.logs(args.name, namespace, args.replica, args.follow, args.tail):
            text = line.text if args.replica else f"{line.replica} | {line.text}"
            print(text, flush=args.follow)
    except TrainopError as err:
        return report_error(err)
    except BrokenPipeError:  # `trainop logs ... | head`
        sys.stderr.close()
    return EXIT_OK
