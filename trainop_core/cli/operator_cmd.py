"""`trainop operator`: run the Kubernetes operator (upstream training-operator's flags)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    from trainop_core.operator.options import add_flags  # no kubernetes import here

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator (a controller per kind; --enable-scheme picks)",
        description="Run the training operator against the cluster of --kubeconfig (else "
        "in-cluster): the controllers, and the admission webhooks that validate and default "
        "jobs (--webhook-*). Upstream training-operator v1's flags, and --decorators.",
    )
    add_flags(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from trainop_core.operator.run import run_from_args

    return run_from_args(args)
