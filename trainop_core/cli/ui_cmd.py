"""`trainop ui`: serve a page that shows jobs, their logs and metrics, and tuning studies.

Starlette and uvicorn (the `ui` extra) are imported inside `run`, so `trainop --help` works
without them. Exit codes: 0 stopped by Ctrl-C, 2 invalid input or the extra is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trainop_core.cli._output import (
    EXIT_INVALID,
    EXIT_OK,
    add_backend_options,
    make_client,
    report_error,
)
from trainop_core.errors import TrainopError

DEFAULT_STUDIES = "~/ray_results"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ui",
        help="watch jobs, logs, metric curves and tuning studies in a browser",
        description=(
            "Serve a page that lists the jobs of a backend (refreshed live), shows one job's "
            "replicas, conditions, events, live logs and metric curves (from its `name=value` "
            "lines), and the tuning studies of `trainop tune`; a job can be deleted there. "
            "Prints the URL to open: it carries a random token, without which every request "
            "gets 401. Needs the ui extra (pip install 'trainop[ui]'). Exit codes: 0 stopped, "
            "2 invalid input or no ui extra."
        ),
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8686; port 0: any free port). A "
        "non-loopback address is served with a warning: anyone reaching it with the token "
        "can delete jobs",
    )
    parser.add_argument(
        "--studies",
        default=DEFAULT_STUDIES,
        metavar="DIR",
        help="where `trainop tune` stored its studies: its --storage-path (default "
        "~/ray_results, Ray Tune's)",
    )
    add_backend_options(
        parser,
        namespace_help="show only this namespace's jobs: a job of another namespace is 404 "
        "there (default: every namespace; on Kubernetes every namespace the kubeconfig's "
        "credentials may list jobs in, cluster-wide)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainop_core import ui

    if ui.missing_extra():
        print(f"error: {ui.UI_MISSING}", file=sys.stderr)
        return EXIT_INVALID
    try:
        host, port = ui.parse_address(args.address or ui.DEFAULT_ADDRESS)
        sock = ui.bind(host, port)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    if not ui.is_loopback(host):
        print(ui.non_loopback_warning(host), file=sys.stderr, flush=True)
    try:
        from trainop_core.ui.app import Settings

        settings = Settings(make_client(args), args.namespace, Path(args.studies).expanduser())
    except TrainopError as err:
        sock.close()
        return report_error(err)
    ui.serve(settings, sock)
    return EXIT_OK
