"""`trainop` entry point: each subcommand lives in its own module with `register(subparsers)`.

A subcommand module's `register` adds its parser and sets `func(args) -> int` (the exit code).
Exit codes: 0 success, 1 the job failed, 2 invalid input or usage, 124 timeout, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import Any

# Order is the order of `trainop --help`.
COMMANDS = (
    "run",
    "submit",
    "get",
    "logs",
    "delete",
    "queue",
    "validate",
    "render",
    "crds",
    "runtimes",
    "operator",
    "tune",
    "ui",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainop",
        description=(
            "Run Kubeflow training job files (kubeflow.org/v1: TFJob, PyTorchJob, MPIJob, ...; "
            "`trainop crds` lists every kind) unchanged: on this machine (the default), on "
            "Kubernetes, or as the Kubernetes operator itself."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"trainop_core.cli.{name}_cmd")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _print_admission_warnings()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


def _print_admission_warnings() -> None:
    """Show `TrainingClient.create`'s AdmissionWarnings as kubectl shows a webhook's warnings
    ("Warning: ..." on stderr); other warnings keep Python's format."""
    from trainop_core.api.admission import AdmissionWarning

    shown = warnings.showwarning
    if getattr(shown, "trainop", False):
        return

    def show(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
        if issubclass(category, AdmissionWarning):
            print(f"Warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kw)

    show.trainop = True  # type: ignore[attr-defined]  # reason: marks our wrapper, once only
    warnings.showwarning = show


if __name__ == "__main__":
    sys.exit(main())
