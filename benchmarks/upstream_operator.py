"""Kubeflow's Go training operator (upstream), built from the Go module proxy, cached per machine.

    PYTHONPATH=. python benchmarks/upstream_operator.py            # build (or reuse) both versions
    PYTHONPATH=. python benchmarks/upstream_operator.py --check    # exit 1 unless both are cached

``github.com/kubeflow/training-operator`` publishes its operator as the main package
``cmd/training-operator.v1``. It is built the way the test control plane's binaries are
(:func:`trainop_core.testing.binaries.build_go_packages`: a scratch module that requires the
published module, ``go mod tidy``, ``go build -trimpath``, this machine's Go only, under ``nice``)
into ``$TRAINOP_CACHE_DIR/go-bin``. Nothing of upstream is kept in this repository.

Two versions: :data:`LATEST` (1.9.x: TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob, MPIJob and
``--kube-api-qps``/``--kube-api-burst``) and :data:`WITH_MXJOB` (1.8.x, the last with MXJob; its
client limits have no flags: controller-runtime v0.17 defaults QPS 20 / burst 30 and, with no
limiter on the config, gives each resource type's REST client a bucket of its own; v1.9.3 puts one
shared limiter on the config).

Running it out of cluster (:func:`webhook_setup`): its cert-controller needs the Secret
``kubeflow/training-operator-webhook-cert`` to exist (it updates it, never creates it), writes a CA
and serving certificate into it, injects the CA into the ValidatingWebhookConfiguration
``validator.training-operator.kubeflow.org`` and holds the job controllers back until the serving
certificate is present in ``/tmp/k8s-webhook-server/serving-certs`` (a mounted Secret in a
cluster; :func:`mount_serving_certs` writes it there out of cluster). The configuration we
pre-create has one webhook whose ``objectSelector`` matches no object and whose failurePolicy is
Ignore: the API server never calls upstream's webhook, so both operators see exactly the same
objects (trainop's webhooks serve too, with no configuration pointing at them).
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path
from typing import Any

from trainop_core.testing.binaries import BinaryBuildError, build_go_packages

MODULE = "github.com/kubeflow/training-operator"
COMMAND = f"{MODULE}/cmd/training-operator.v1"
BINARY = "training-operator.v1"
LATEST = "v1.9.3"
WITH_MXJOB = "v1.8.1"
VERSIONS = (LATEST, WITH_MXJOB)

OPERATOR_NAMESPACE = "kubeflow"  # cert.getOperatorNamespace() without MY_POD_NAMESPACE
SECRET_NAME = "training-operator-webhook-cert"  # --webhook-secret-name's default
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # hard-coded in upstream's pkg/cert
NEVER_LABEL = "trainop.benchmark/upstream-webhook-never-matches"


def upstream_binary(version: str = LATEST, *, build: bool = True) -> Path:
    """The cached binary of upstream's operator at `version`, built first if needed."""
    return build_go_packages(MODULE, version, [COMMAND], build=build)[BINARY]


def webhook_setup() -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) to create before upstream starts: its namespace, the empty
    Secret its cert-controller fills, and a webhook configuration that matches nothing."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": OPERATOR_NAMESPACE},
    }
    webhook = {
        "name": "validator.jobs.training-operator.kubeflow.org",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "clientConfig": {"service": {"name": "training-operator", "namespace": OPERATOR_NAMESPACE}},
        "rules": [
            {
                "apiGroups": ["kubeflow.org"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["*"],
            }
        ],
        # No object carries this label: the API server never sends upstream an admission review.
        "objectSelector": {"matchExpressions": [{"key": NEVER_LABEL, "operator": "Exists"}]},
    }
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [webhook],
    }
    return [
        ("/api/v1/namespaces", namespace),
        (f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets", secret),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            configuration,
        ),
    ]


def mount_serving_certs(secret: dict[str, Any], cert_dir: Path = CERT_DIR) -> bool:
    """Write the serving certificate upstream's cert-controller put into `secret` where a Secret
    volume would have mounted it; False while the Secret has none yet."""
    data = secret.get("data") or {}
    if not data.get("tls.crt") or not data.get("tls.key"):
        return False
    cert_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if data.get(name):
            (cert_dir / name).write_bytes(base64.b64decode(data[name]))
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not build; exit 1 if missing")
    parser.add_argument("--version", action="append", choices=VERSIONS, help="default: both")
    args = parser.parse_args(argv)
    for version in args.version or VERSIONS:
        started = time.monotonic()
        try:
            path = upstream_binary(version, build=not args.check)
        except BinaryBuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{MODULE} {version}: {path} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
