"""`trainop crds [-o yaml|json] [KIND...]`: print the CRDs, ready for `kubectl apply -f -`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainop_core.crds import all_crds, to_yaml
from trainop_core.errors import TrainopError
from trainop_core.kinds.table import build_registry

EXIT_OK = 0
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "crds",
        help="print the CustomResourceDefinitions (for kubectl apply -f -)",
        description="Print the CRDs of every known kind, or of the named kinds only.",
    )
    parser.add_argument("kinds", nargs="*", metavar="KIND", help="only these kinds (e.g. TFJob)")
    parser.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="a multi-document YAML stream (default) or a JSON v1 List",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        registry = build_registry().select(args.kinds)
    except (ValueError, TrainopError) as err:
        print(f"trainop crds: {err}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(render(all_crds(registry.kinds), args.output))
    return EXIT_OK


def render(crds: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        listing = {"apiVersion": "v1", "kind": "List", "items": crds}
        return json.dumps(listing, indent=2) + "\n"
    return to_yaml(crds)
