"""`trainop render FILE`: every object the operator would create for FILE's jobs on Kubernetes.

Output is one `kind: List` (PodGroup first when gang scheduling is asked for, then the kind's
other objects such as MPIJob's ConfigMap and launcher RBAC, then pods, then services), exactly as
the planner builds them on a job's first reconcile, defaults applied, and decorated as the
operator decorates them: the decorator configuration of `--decorators` (default
`$TRAINOP_DECORATORS`) runs its in-process decorators and calls its decorator servers; pods that
wait for others to run (MPIJob's launcher) follow as the reconcile that sees those running creates
them.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainop_core.api.bounds import total_replicas
from trainop_core.api.job import TrainingJob
from trainop_core.api.types import utc_now
from trainop_core.api.validation import prepare_all
from trainop_core.cli._output import add_runtimes_option
from trainop_core.decorators.config import DecoratorConfig, load_decorator_config
from trainop_core.errors import InvalidJobError, Problem, TerminalError
from trainop_core.kinds.base import Kind
from trainop_core.planner import (
    KubernetesAddressing,
    Observed,
    ObservedPod,
    Plan,
    PlanOptions,
    plan,
)
from trainop_core.planner.pods import REPLICA_INDEX, REPLICA_TYPE

# Stands in for the uid the API server would assign; derived from the job's identity so that
# renders are stable and several jobs in one file stay distinguishable.
UID_NAMESPACE = uuid.UUID("6b1f3f04-9d0c-4e39-9c2e-7a0f5d0c1e11")


def placeholder_uid(kind: Kind, job: TrainingJob) -> str:
    return str(uuid.uuid5(UID_NAMESPACE, f"{kind.kind}/{job.namespace}/{job.name}"))


def _place(job: TrainingJob, kind: Kind, namespace: str | None) -> TrainingJob:
    """The job as stored: in `namespace` (like kubectl -n) and with a uid."""
    placed = job.model_copy(deep=True)
    if namespace is not None and placed.metadata.namespace not in (None, namespace):
        where = f"{kind.kind} {job.name}"
        raise InvalidJobError(
            [
                Problem(
                    "metadata.namespace", f"is {job.namespace!r} but --namespace is {namespace!r}"
                )
            ],
            job=where,
        )
    if namespace is not None:
        placed.metadata.namespace = namespace
    placed.metadata.uid = placed.metadata.uid or placeholder_uid(kind, placed)
    return placed


class DecorationRefused(TerminalError):
    """A decorator server failed (failurePolicy Fail) or refused a job: nothing to render."""


def render_objects(
    jobs: Sequence[tuple[Kind, TrainingJob]],
    *,
    namespace: str | None = None,
    gang_scheduler_name: str = "",
    cluster_domain: str = "",
    decorators: DecoratorConfig | None = None,
    warn: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """A `v1 List` of what a first reconcile creates for each job, decorated by `decorators`
    (default: none). Raises DecorationRefused when a decorator server fails the job; `warn`
    hears of every failure its policy ignores."""
    from trainop_core.decorators.decoration import Decorators

    built = Decorators.from_config(decorators or DecoratorConfig(entry_points=False))
    options = PlanOptions(gang_scheduler_name=gang_scheduler_name, cluster_domain=cluster_domain)
    # Show the pods even with Volcano, as they will be once the PodGroup is admitted.
    observed = Observed(pod_group_phase="Inqueue" if gang_scheduler_name else None)
    items: list[dict[str, Any]] = []
    for kind, job in jobs:
        placed = _place(job, kind, namespace)
        addressing = KubernetesAddressing(placed, kind, cluster_domain)
        first = plan(placed, kind, observed, utc_now(), addressing, options, built.in_process)
        decorated = built.servers.decorate(placed, kind, first)
        if decorated.failure:
            raise DecorationRefused(f"{kind.kind} {placed.key}: {decorated.failure}")
        for message in decorated.ignored:
            warn(f"{kind.kind} {placed.key}: {message}")
        first = decorated.plan
        items += [first.pod_group] if first.pod_group else []
        items += first.apply_objects + first.create_pods + _waiting_pods(placed, kind, first)
        items += first.create_services
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _waiting_pods(job: TrainingJob, kind: Kind, first: Plan) -> list[dict[str, Any]]:
    """Pods a first reconcile holds back (`Kind.start_after`), as the reconcile that sees the
    first pods running creates them."""
    if len(first.create_pods) >= total_replicas(job):
        return []
    running = tuple(
        ObservedPod(
            name=pod["metadata"]["name"],
            replica_type=kind.canonical_replica_type(pod["metadata"]["labels"][REPLICA_TYPE]),
            index=int(pod["metadata"]["labels"][REPLICA_INDEX]),
            phase="Running",
        )
        for pod in first.create_pods
    )
    later = plan(job, kind, Observed(pods=running), utc_now(), KubernetesAddressing(job, kind))
    return later.create_pods


def dump(objects: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(objects, indent=2) + "\n"
    return yaml.safe_dump(objects, sort_keys=False)


MAX_RENDERED_REPLICAS = 10_000  # a 2**31-replica job is valid, but not something to print


def _check_size(jobs: Sequence[tuple[Kind, TrainingJob]], origin: str) -> None:
    total = sum(total_replicas(job) for _, job in jobs)
    if total > MAX_RENDERED_REPLICAS:
        message = f"the job(s) have {total} replicas; render prints at most {MAX_RENDERED_REPLICAS}"
        raise InvalidJobError([Problem("", message)], source=origin)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_decorator_config(args.decorators)
        jobs = _prepare(args.file, args.runtimes)
        _check_size(jobs, str(args.file))
        objects = render_objects(
            jobs,
            namespace=args.namespace,
            gang_scheduler_name=args.gang_scheduler_name,
            cluster_domain=args.cluster_domain,
            decorators=config,
            warn=lambda message: print(f"warning: {message}", file=sys.stderr),
        )
    except (InvalidJobError, DecorationRefused) as err:
        print(str(err), file=sys.stderr)
        return 2
    sys.stdout.write(dump(objects, args.output))
    return 0


def _prepare(file: str, runtimes: str | None) -> list[tuple[Kind, TrainingJob]]:
    """Every job of `file`; a Kubeflow Trainer v2 TrainJob with its runtime (see --runtimes)."""
    from trainop_core.api.load import read_documents
    from trainop_core.runtimes.prepare import prepare_trainjob, v2_document

    single = v2_document(read_documents(Path(file)))
    if single is not None:
        return [prepare_trainjob(single, runtimes)]
    return prepare_all(file)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render",
        help="print the pods, services, PodGroup and other objects the operator would create",
        description=__doc__,
    )
    parser.add_argument(
        "file", help="a job file (YAML or JSON, several documents allowed; or one TrainJob)"
    )
    add_runtimes_option(parser)
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    parser.add_argument(
        "--gang-scheduler-name",
        default="",
        help='"volcano" or a scheduler-plugins scheduler name; adds the PodGroup',
    )
    parser.add_argument("--namespace", "-n", default=None, help="namespace for jobs that set none")
    parser.add_argument(
        "--cluster-domain", default="", help="CUSTOM_CLUSTER_DOMAIN appended to TF_CONFIG hosts"
    )
    parser.add_argument(
        "--decorators",
        default=None,
        metavar="FILE",
        help="decorator configuration (DecoratorConfiguration YAML; default $TRAINOP_DECORATORS, "
        "else the installed pod-decorator plugins only)",
    )
    parser.set_defaults(func=run)
