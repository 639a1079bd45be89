"""The operator's flags (upstream training-operator v1's names and defaults) and their parsed form.

`add_flags` is shared by `trainop operator` and `python -m trainop_core.operator`, so the two accept
exactly the same command line. The lease timings, watch timeouts and cluster domain are extra flags
(controller-runtime options upstream hard-codes), useful for tests and large clusters.

The endpoints are closed by default where upstream's v1 operator leaves them open: /metrics is
served over HTTPS (:8443) to clients the API server authenticates and authorizes
(`metrics_auth.py`), and plain HTTP (:8080) only with `--metrics-secure=false`, kubebuilder's
flags; the probes listen on loopback unless told an address (the manifests give the pod's IP,
which the kubelet probes).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB
from trainop_core.operator.liveness import WATCH_READ_MARGIN, WATCH_TIMEOUT
from trainop_core.operator.webhook.options import (
    WebhookOptions,
    add_webhook_flags,
    webhook_options_from_args,
)
from trainop_core.progress import WRITE_INTERVAL

DEFAULT_LEADER_ELECTION_ID = "1ca428e5.training-operator.kubeflow.org"
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_SECURE_METRICS_ADDRESS = ":8443"
DEFAULT_PLAIN_METRICS_ADDRESS = ":8080"
DEFAULT_PROBE_ADDRESS = "127.0.0.1:8081"


@dataclass(frozen=True)
class LeaseTimings:
    """controller-runtime's leader-election defaults (seconds)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class Options:
    """Everything the manager needs to know from the command line."""

    enable_schemes: tuple[str, ...] = ()
    namespace: str = ""
    gang_scheduler_name: str = ""
    controller_threads: int = 1
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    metrics_bind_address: str = DEFAULT_SECURE_METRICS_ADDRESS
    metrics_secure: bool = True
    metrics_cert_path: str = ""  # "": a self-signed certificate made at start
    metrics_cert_name: str = "tls.crt"
    metrics_cert_key: str = "tls.key"
    health_probe_bind_address: str = DEFAULT_PROBE_ADDRESS
    leader_elect: bool = False
    leader_election_id: str = DEFAULT_LEADER_ELECTION_ID
    leader_election_namespace: str = ""
    lease: LeaseTimings = field(default_factory=LeaseTimings)
    kubeconfig: str = ""
    cluster_domain: str = ""
    # Server-side timeoutSeconds minimum (jittered up to 2x), and how much longer the client
    # waits for a byte: short, so that a half-open watch is noticed within 45 s (liveness.py).
    watch_timeout: float = WATCH_TIMEOUT
    watch_read_timeout: float = WATCH_READ_MARGIN
    cache_sync_timeout: float = 120.0
    pytorch_init_container_image: str = "alpine:3.10"
    pytorch_init_container_max_tries: int = 100
    decorators: str = ""  # a DecoratorConfiguration file; "" = $TRAINOP_DECORATORS, else plugins
    webhook: WebhookOptions = field(default_factory=WebhookOptions)  # port 0: no webhooks
    mpi_kubectl_delivery_image: str = "kubeflow/kubectl-delivery:latest"
    # Seconds between two writes of one job's training progress (operator/progress.py); 0: off.
    progress_interval: float = WRITE_INTERVAL
    # Replicas of one job in all (operator/jobsize.py): above it refused, never planned.
    max_replicas_per_job: int = MAX_REPLICAS_PER_JOB

    def lease_namespace(self) -> str:
        """--leader-election-namespace, else the operator's own namespace, else "default"."""
        if self.leader_election_namespace:
            return self.leader_election_namespace
        if os.path.exists(SA_NAMESPACE_FILE):
            with open(SA_NAMESPACE_FILE) as fh:
                return fh.read().strip() or "default"
        return self.namespace or "default"


def add_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--enable-scheme",
        action="append",
        default=[],
        metavar="KIND",
        help="enable the controller of this kind (repeatable, case-insensitive); none = every "
        "kubeflow.org/v1 kind; TrainJob (Kubeflow Trainer v2, with its runtimes) only when named",
    )
    add(
        "--namespace",
        default=os.environ.get("KUBEFLOW_NAMESPACE", ""),
        help="watch only this namespace (default $KUBEFLOW_NAMESPACE; empty = all namespaces)",
    )
    add(
        "--gang-scheduler-name",
        default="",
        help='gang scheduler: "volcano" or a scheduler-plugins scheduler name; empty = off',
    )
    add("--controller-threads", type=int, default=1, help="concurrent reconciles per controller")
    add("--kube-api-qps", type=float, default=20.0, help="client-side API rate (<= 0: unlimited)")
    add("--kube-api-burst", type=int, default=30, help="client-side API burst")
    _add_endpoint_flags(parser)
    add("--leader-elect", action="store_true", help="only the Lease holder reconciles")
    add("--leader-election-id", default=DEFAULT_LEADER_ELECTION_ID, help="the Lease's name")
    add("--leader-election-namespace", default="", help="the Lease's namespace")
    lease = "how long a Lease holds without renewal (15)"
    add("--leader-election-lease-duration", type=float, default=15.0, metavar="SECONDS", help=lease)
    renew = "the holder gives up leading if it cannot renew for this long (10)"
    add("--leader-election-renew-deadline", type=float, default=10.0, metavar="SECONDS", help=renew)
    retry = "seconds between tries to acquire or renew the Lease (2)"
    add("--leader-election-retry-period", type=float, default=2.0, metavar="SECONDS", help=retry)
    add(
        "--kubeconfig",
        default="",
        help="kubeconfig file (else $KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )
    add(
        "--cluster-domain",
        default=os.environ.get("CUSTOM_CLUSTER_DOMAIN", ""),
        help="cluster domain for TF_CONFIG host names (default $CUSTOM_CLUSTER_DOMAIN)",
    )
    add(
        "--watch-timeout",
        type=float,
        default=WATCH_TIMEOUT,
        metavar="SECONDS",
        help=(
            "minimum server-side watch timeout (jittered up to twice this); a watch ends and is "
            "resumed that often, so that a dead one is noticed (default %(default)s)"
        ),
    )
    add(
        "--watch-read-timeout",
        type=float,
        default=WATCH_READ_MARGIN,
        metavar="SECONDS",
        help=(
            "how much longer than its server-side timeout the client reads a silent watch "
            "(an idle watch carries no bytes until the server ends it); a half-open connection "
            "is noticed within twice --watch-timeout plus this (default %(default)s: 45 s)"
        ),
    )
    add(
        "--pytorch-init-container-image",
        default="alpine:3.10",
        help="image of the init container PyTorch workers use to wait for the master",
    )
    add(
        "--pytorch-init-container-max-tries",
        type=int,
        default=100,
        help="DNS lookups the PyTorch init container tries before giving up",
    )
    add(
        "--decorators",
        default="",
        metavar="FILE",
        help="decorator configuration: in-process decorators and decorator servers for every "
        "pod (DecoratorConfiguration YAML; default $TRAINOP_DECORATORS, else the installed "
        "pod-decorator plugins only)",
    )
    add(
        "--mpi-kubectl-delivery-image",
        default="kubeflow/kubectl-delivery:latest",
        help="image of the init container that gives MPI launchers kubectl",
    )
    add(
        "--progress-interval",
        type=float,
        default=WRITE_INTERVAL,
        metavar="SECONDS",
        help="training progress: read each running job's primary pod log (pods/log) for "
        "progressPercentage=, estimatedRemainingSeconds= and name=value lines and write them "
        "to the job (a TrainJob's status.trainerStatus, a v1 job's trainop.dev/trainer-status "
        "annotation) at most once per SECONDS (default %(default)s); 0 turns it off",
    )
    add(
        "--max-replicas-per-job",
        type=int,
        default=MAX_REPLICAS_PER_JOB,
        metavar="N",
        help="refuse a job of more than N replicas in all (the admission webhook denies it "
        "naming the replica count; without the webhook the job is marked Failed before "
        "anything is planned). The operator plans and writes a job replica by replica, about "
        "7 KiB of memory and two API writes each; the default %(default)s is more than a "
        "cluster can run as one job (Kubernetes supports 5,000 nodes and 150,000 pods) and "
        "keeps one job's plan under about 100 MiB; upstream has no such bound",
    )
    add(
        "--log-level",
        default=os.environ.get("TRAINOP_LOG_LEVEL", "INFO"),
        help="a logging level: DEBUG, INFO, ... (default: $TRAINOP_LOG_LEVEL, else INFO)",
    )
    add_webhook_flags(parser)


def parse_bool(text: str) -> bool:
    """Go's flag booleans: true/false, 1/0, t/f (any case)."""
    value = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}.get(
        text.strip().lower()
    )
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true or false)")
    return value


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--metrics-bind-address",
        default=None,
        metavar="[HOST]:PORT",
        help=f"/metrics address (default {DEFAULT_SECURE_METRICS_ADDRESS}, with "
        f'--metrics-secure=false {DEFAULT_PLAIN_METRICS_ADDRESS}); "0" disables it',
    )
    add(
        "--metrics-secure",
        type=parse_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="serve /metrics over HTTPS, each scrape authenticated (TokenReview) and authorized "
        "(SubjectAccessReview: get on /metrics) by the API server (default true); "
        "--metrics-secure=false serves plain HTTP to anyone who reaches the address",
    )
    add(
        "--metrics-cert-path",
        default="",
        metavar="DIR",
        help="directory holding the metrics serving certificate and key, re-read when they "
        "change (default: a self-signed certificate made at start, kept in memory)",
    )
    add("--metrics-cert-name", default="tls.crt", help="certificate file in --metrics-cert-path")
    add("--metrics-cert-key", default="tls.key", help="key file in --metrics-cert-path")
    add(
        "--health-probe-bind-address",
        default=DEFAULT_PROBE_ADDRESS,
        metavar="[HOST]:PORT",
        help="/healthz and /readyz address (default %(default)s: this machine only; in a pod "
        "give the pod's IP, which the kubelet probes, e.g. $(POD_IP):8081)",
    )


def _metrics_address(args: argparse.Namespace) -> str:
    if args.metrics_bind_address is not None:
        return str(args.metrics_bind_address)
    return DEFAULT_SECURE_METRICS_ADDRESS if args.metrics_secure else DEFAULT_PLAIN_METRICS_ADDRESS


def options_from_args(args: argparse.Namespace) -> Options:
    if args.controller_threads < 1:
        raise ValueError("--controller-threads must be at least 1")
    timings = LeaseTimings(
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    )
    if not timings.lease_duration > timings.renew_deadline > timings.retry_period > 0:
        raise ValueError("need lease duration > renew deadline > retry period > 0")
    if not 0 <= args.progress_interval < float("inf"):  # also false for nan
        raise ValueError("--progress-interval must be 0 (off) or a number of seconds")
    if not 1 <= args.max_replicas_per_job < 2**31:
        raise ValueError("--max-replicas-per-job must be from 1 to 2147483647")
    if args.metrics_cert_path and not args.metrics_secure:
        raise ValueError(
            "--metrics-cert-path serves HTTPS: it cannot go with --metrics-secure=false"
        )
    return Options(
        enable_schemes=tuple(args.enable_scheme),
        namespace=args.namespace,
        gang_scheduler_name=args.gang_scheduler_name,
        controller_threads=args.controller_threads,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        metrics_bind_address=_metrics_address(args),
        metrics_secure=args.metrics_secure,
        metrics_cert_path=args.metrics_cert_path,
        metrics_cert_name=args.metrics_cert_name,
        metrics_cert_key=args.metrics_cert_key,
        health_probe_bind_address=args.health_probe_bind_address,
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=args.leader_election_namespace,
        lease=timings,
        kubeconfig=args.kubeconfig,
        cluster_domain=args.cluster_domain,
        watch_timeout=args.watch_timeout,
        watch_read_timeout=args.watch_read_timeout,
        pytorch_init_container_image=args.pytorch_init_container_image,
        pytorch_init_container_max_tries=args.pytorch_init_container_max_tries,
        decorators=args.decorators,
        webhook=webhook_options_from_args(args),
        mpi_kubectl_delivery_image=args.mpi_kubectl_delivery_image,
        progress_interval=args.progress_interval,
        max_replicas_per_job=args.max_replicas_per_job,
    )
