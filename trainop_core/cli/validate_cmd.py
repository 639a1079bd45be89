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
from trainop_core.api.validation import prepare_document
from trainop_core.errors import InvalidJobError, Problem

EXIT_OK = 0
EXIT_INVALID = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check job files (all problems at once) without running them",
        description=(
            "Load, default and validate every job in each FILE the way the operator's webhook "
            "would, and print its warnings (deprecated fields). Exit 0 when every job is valid, "
            "2 otherwise."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON job file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    results = [validate_file(path) for path in args.files]
    return EXIT_OK if all(results) else EXIT_INVALID


def validate_file(path: str) -> bool:
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
    return all([_validate_document(doc) for doc in docs])


def _validate_document(doc: Document) -> bool:
    try:
        kind, job = prepare_document(doc)
    except InvalidJobError as err:
        _report(err)
        return False
    print(f"{doc.source}: {job.kind}/{job.name}: valid")
    for warning in admission_warnings(job, kind):
        print(f"{doc.source}: {job.kind}/{job.name}: warning: {warning}", file=sys.stderr)
    return True


def _report(err: InvalidJobError) -> None:
    print(str(err), file=sys.stderr)
