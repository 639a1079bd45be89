"""`trainop crds [-o yaml|json] [KIND...]`: print the CRDs, ready for `kubectl apply -f -`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
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
        description=(
            "Print the CRDs of every kind the operator can serve: the kubeflow.org/v1 kinds "
            "(TFJob, PyTorchJob, ...) and Kubeflow Trainer v2's TrainJob, TrainingRuntime and "
            "ClusterTrainingRuntime (trainer.kubeflow.org/v1alpha1, with Trainer v2.3's "
            "defaults and validation rules). Name kinds to print only theirs, e.g. "
            "`trainop crds TrainJob TrainingRuntime ClusterTrainingRuntime | kubectl apply "
            "--server-side -f -`."
        ),
    )
    parser.add_argument(
        "kinds", nargs="*", metavar="KIND", help="only these kinds (e.g. TFJob, TrainJob)"
    )
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
        crds = served_crds(args.kinds)
    except (ValueError, TrainopError) as err:
        print(f"trainop crds: {err}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(render(crds, args.output))
    return EXIT_OK


def served_crds(names: Sequence[str]) -> list[dict[str, Any]]:
    """The CRDs of the named kinds (case-insensitive), or of every kind the operator can serve:
    the registry's v1 kinds, then Trainer's. ValueError naming the unknown ones."""
    from trainop_core.runtimes.crds import trainer_crds

    registry = build_registry()
    trainer = {crd["spec"]["names"]["kind"].lower(): crd for crd in trainer_crds()}
    if not names:
        return [*all_crds(registry.kinds), *trainer.values()]
    v1 = [n for n in names if n.lower() not in trainer]
    unknown = [n for n in v1 if n not in registry]
    if unknown:
        known = ", ".join(
            [*registry.names, *(c["spec"]["names"]["kind"] for c in trainer.values())]
        )
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}; known kinds: {known}")
    chosen = {n.lower() for n in names}
    v1_crds = all_crds(registry.select(v1).kinds) if v1 else []
    return [*v1_crds, *(crd for kind, crd in trainer.items() if kind in chosen)]


def render(crds: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        listing = {"apiVersion": "v1", "kind": "List", "items": crds}
        return json.dumps(listing, indent=2) + "\n"
    return to_yaml(crds)
