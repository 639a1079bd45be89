"""`trainop runtimes [--runtimes DIR] [-o wide|yaml]`: the training runtimes a TrainJob can name.

`-o yaml` prints them ready for `kubectl apply --server-side -f -`: installing the defaults on a
cluster is that one command.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainop_core.cli._output import add_runtimes_option, report_error, table
from trainop_core.errors import TrainopError

EXIT_OK = 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "runtimes",
        help="list the training runtimes a TrainJob can name (or print them for kubectl)",
        description=(
            "List the Kubeflow Trainer v2 runtimes (ClusterTrainingRuntime, TrainingRuntime) "
            "that `trainop run` finds for a TrainJob: those of --runtimes DIR first, then the "
            "defaults trainop ships (Kubeflow Trainer's torch, xgboost, ... runtimes). "
            "`-o yaml` prints them for `kubectl apply --server-side -f -`."
        ),
    )
    add_runtimes_option(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml"),
        default="table",
        help="a table (default) or a multi-document YAML stream of the runtimes",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainop_core.crds import to_yaml
    from trainop_core.runtimes.prepare import catalog_for
    from trainop_core.runtimes.translate import policy_name

    try:
        catalog = catalog_for(args.runtimes)
    except TrainopError as err:
        return report_error(err)
    if args.output == "yaml":
        docs = [
            r.model_dump(by_alias=True, exclude_none=True, mode="json") for r in catalog.runtimes
        ]
        sys.stdout.write(to_yaml(docs))
        return EXIT_OK
    rows = [["NAME", "KIND", "NAMESPACE", "FRAMEWORK", "ML POLICY", "NODES"]]
    for r in catalog.runtimes:
        nodes = (r.spec.ml_policy.num_nodes if r.spec.ml_policy else None) or 1
        namespace = r.metadata.namespace or "-"
        rows.append([r.name, r.kind, namespace, r.framework or "-", policy_name(r), str(nodes)])
    print(table(rows))
    return EXIT_OK
