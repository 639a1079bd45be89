"""`trainop delete NAME`: stop every replica and remove the job."""

from __future__ import annotations

import argparse
from typing import Any

from trainop_core.cli._output import (
    EXIT_OK,
    add_backend_options,
    make_client,
    report_error,
    resource,
)
from trainop_core.errors import TrainopError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "delete",
        help="stop a job and remove it",
        description=(
            "Stop every replica of the job (SIGTERM, then SIGKILL after the grace period) and "
            "remove it with its status and logs (a job whose stored state is damaged too). A job "
            "this user cannot remove (a read-only or another user's state directory) is left "
            "running, with the reason. Exit codes: 0 deleted, 1 no such job or not removed, 2 "
            "invalid name."
        ),
    )
    parser.add_argument("names", nargs="+", metavar="NAME", help="job name(s)")
    add_backend_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        client = make_client(args)
    except TrainopError as err:
        return report_error(err)
    namespace = args.namespace or client.default_namespace
    code = EXIT_OK
    for name in args.names:
        try:
            kind = client.get(name, namespace).kind
            client.delete(name, namespace)
        except TrainopError as err:
            code = report_error(err)
            continue
        print(f'{resource(kind)} "{name}" deleted')
    return code
