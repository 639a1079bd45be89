"""`trainop validate FILE...`: load, default and validate job files without running anything.

Prints `FILE: KIND/NAME: valid` per job on stdout; every problem as
`FILE: KIND/NAME: FIELD.PATH: message` on stderr, and every warning upstream's webhook would give
(a deprecated field) as `FILE: KIND/NAME: warning: ...` on stderr. Exit 0 when all are valid
(warnings or not), 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trainop_core.api.admission import admission_warnings
from trainop_core.api.load import Document, read_documents
from trainop_core.api.trainjob_validation import is_v2, parse_v2
from trainop_core.api.validation import prepare_document
from trainop_core.cli._output import add_runtimes_option
from trainop_core.errors import InvalidJobError, Problem

EXIT_OK = 0
EXIT_INVALID = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check job files (all problems at once) without running them",
        description=(
            "Load, default and validate every job in each FILE the way the operator's webhook "
            "would, and print its warnings (deprecated fields). A Kubeflow Trainer v2 TrainJob "
            "is checked with the runtime it names (see --runtimes); a runtime on its own. Exit 0 "
            "when every job is valid, 2 otherwise."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON job file")
    add_runtimes_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    results = [validate_file(path, args.runtimes) for path in args.files]
    return EXIT_OK if all(results) else EXIT_INVALID


def validate_file(path: str, runtimes: str | None = None) -> bool:
    """Report on every job of one file; True when all of them are valid."""
    try:
        # A path argument is always a file, even when its name does not end in .yaml.
        docs = read_documents(Path(path))
    except InvalidJobError as err:
        _report(err)
        return False
    if not docs:
        _report(InvalidJobError([Problem("", "no jobs found")], source=path))
        return False
    return all([_validate_document(doc, runtimes) for doc in docs])


def _validate_document(doc: Document, runtimes: str | None = None) -> bool:
    if is_v2(doc.data):
        return _validate_v2(doc, runtimes)
    try:
        kind, job = prepare_document(doc)
    except InvalidJobError as err:
        _report(err)
        return False
    print(f"{doc.source}: {job.kind}/{job.name}: valid")
    for warning in admission_warnings(job, kind):
        print(f"{doc.source}: {job.kind}/{job.name}: warning: {warning}", file=sys.stderr)
    return True


def _validate_v2(doc: Document, runtimes: str | None) -> bool:
    """A runtime is checked alone; a TrainJob with the runtime it names (found as `run` would)."""
    from trainop_core.api import trainjob as v2
    from trainop_core.runtimes.prepare import prepare_trainjob

    try:
        obj = parse_v2(doc.data)
        if isinstance(obj, v2.TrainJob):
            prepare_trainjob(doc, runtimes)
    except InvalidJobError as err:  # a runtime file's own error keeps that file's name
        _report(InvalidJobError(err.problems, source=err.source or doc.source, job=err.job))
        return False
    print(f"{doc.source}: {obj.kind}/{obj.name}: valid")
    return True


def _report(err: InvalidJobError) -> None:
    print(str(err), file=sys.stderr)
