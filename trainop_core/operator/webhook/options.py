"""The webhook server's flags (upstream v1.8/v1.9's names where it has them) and parsed form.

Kept apart from the operator's other flags so the webhook server stays one self-contained
module: `add_webhook_flags` and `webhook_options_from_args` are all `options.py` calls.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from trainop_core.operator.webhook.certs import CA_VALIDITY, LOOKAHEAD, SERVING_VALIDITY, Validity

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
CERT_MODES = ("self", "external")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


IN_CLUSTER_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def in_cluster() -> bool:
    """Whether this process runs in a pod (the API server's address and a service account
    mounted): then its temporary directory is its container's alone."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isdir(SERVICE_ACCOUNT_DIR)


def default_cert_dir() -> str:
    """controller-runtime's fixed path in a pod (the Secret mounted there); outside a cluster a
    directory in the user's home, which no other local user can plant."""
    if in_cluster():
        return IN_CLUSTER_CERT_DIR
    return str(Path.home() / ".trainop" / "webhook-certs")


@dataclass(frozen=True)
class WebhookOptions:
    """Where the webhook server listens, whose certificate it serves and how it is renewed."""

    port: int = 9443  # 0: no webhook server
    host: str = ""  # "": every interface
    service_name: str = "training-operator"
    secret_name: str = "training-operator-webhook-cert"
    namespace: str = ""  # of the Service and Secret; "": the operator's own
    cert_management: str = "self"  # or "external" (cert-manager writes cert_dir)
    cert_dir: str = IN_CLUSTER_CERT_DIR
    host_names: tuple[str, ...] = ()  # extra names/IPs for the serving certificate
    validating_configuration: str = "validator.training-operator.kubeflow.org"
    mutating_configuration: str = "defaulter.training-operator.kubeflow.org"
    validity: Validity = field(default_factory=Validity)
    check_period: float = 60.0  # seconds between looks at the Secret and the configurations

    def own_namespace(self) -> str:
        """--webhook-namespace, else $POD_NAMESPACE, else the ServiceAccount's, else default."""
        if self.namespace:
            return self.namespace
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        if os.path.exists(SA_NAMESPACE_FILE):
            with open(SA_NAMESPACE_FILE) as fh:
                return fh.read().strip() or "default"
        return "default"

    def serving_hosts(self) -> tuple[str, ...]:
        """The serving certificate's names: the Service's DNS names, then the extra ones."""
        ns, svc = self.own_namespace(), self.service_name
        names = (f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", *self.host_names)
        return tuple(dict.fromkeys(names))


def parse_duration(text: str) -> float:
    """Seconds in `30s`, `15m`, `12h`, `90d` or a plain number of seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 15m, 12h or 90d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def add_webhook_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--webhook-server-port", type=int, default=9443, help="admission webhooks; 0 = none")
    add("--webhook-host", default="", help="address the webhook server binds (default: all)")
    add("--webhook-service-name", default="training-operator", help="the webhook Service")
    add(
        "--webhook-secret-name",
        default="training-operator-webhook-cert",
        help="the Secret holding the webhook's CA and serving certificate",
    )
    add(
        "--webhook-namespace",
        default="",
        help="namespace of that Service and Secret (default: the operator's own)",
    )
    add(
        "--webhook-cert-management",
        choices=CERT_MODES,
        default="self",
        help="self: the operator makes, renews and injects its certificates; external: "
        "cert-manager (or another) writes tls.crt/tls.key into --webhook-cert-dir",
    )
    add(
        "--webhook-cert-dir",
        default=None,
        help="where tls.crt/tls.key are read with external management (default: "
        f"{IN_CLUSTER_CERT_DIR} in a cluster, where the Secret is mounted; else "
        "~/.trainop/webhook-certs: a fixed path under the shared temporary directory could be "
        "planted by another local user). Outside a cluster a directory another user owns or "
        "may write is refused",
    )
    add(
        "--webhook-host-names",
        default="",
        metavar="NAMES",
        help="extra DNS names or IP addresses for the serving certificate, comma-separated",
    )
    add(
        "--webhook-validating-configuration",
        default="validator.training-operator.kubeflow.org",
        help="ValidatingWebhookConfiguration whose caBundle the operator writes",
    )
    add(
        "--webhook-mutating-configuration",
        default="defaulter.training-operator.kubeflow.org",
        help="MutatingWebhookConfiguration whose caBundle the operator writes",
    )
    add(
        "--webhook-ca-validity",
        type=parse_duration,
        default=CA_VALIDITY.total_seconds(),
        metavar="DURATION",
        help="lifetime of the self-made CA (default 3650d)",
    )
    add(
        "--webhook-cert-validity",
        type=parse_duration,
        default=SERVING_VALIDITY.total_seconds(),
        metavar="DURATION",
        help="lifetime of the serving certificate (default 365d)",
    )
    add(
        "--webhook-cert-lookahead",
        type=parse_duration,
        default=LOOKAHEAD.total_seconds(),
        metavar="DURATION",
        help="renew a certificate when less than this is left of it (default 90d)",
    )
    add(
        "--webhook-cert-check-period",
        type=parse_duration,
        default=60.0,
        metavar="DURATION",
        help="how often the Secret and the webhook configurations are checked, and "
        "certificates renewed if due (default 1m)",
    )


def webhook_options_from_args(args: argparse.Namespace) -> WebhookOptions:
    validity = Validity(
        timedelta(seconds=args.webhook_ca_validity),
        timedelta(seconds=args.webhook_cert_validity),
        timedelta(seconds=args.webhook_cert_lookahead),
    )
    if not 0 <= args.webhook_server_port <= 65535:
        raise ValueError("--webhook-server-port must be between 0 and 65535")
    if not validity.serving > validity.lookahead > timedelta(0):
        raise ValueError("need --webhook-cert-validity > --webhook-cert-lookahead > 0")
    if validity.ca < validity.serving:
        raise ValueError("--webhook-ca-validity must be at least --webhook-cert-validity")
    if args.webhook_cert_check_period <= 0:
        raise ValueError("--webhook-cert-check-period must be positive")
    hosts = tuple(h.strip() for h in args.webhook_host_names.split(",") if h.strip())
    return WebhookOptions(
        port=args.webhook_server_port,
        host=args.webhook_host,
        service_name=args.webhook_service_name,
        secret_name=args.webhook_secret_name,
        namespace=args.webhook_namespace,
        cert_management=args.webhook_cert_management,
        cert_dir=args.webhook_cert_dir or default_cert_dir(),
        host_names=hosts,
        validating_configuration=args.webhook_validating_configuration,
        mutating_configuration=args.webhook_mutating_configuration,
        validity=validity,
        check_period=args.webhook_cert_check_period,
    )
