"""Admission webhooks served by `trainop operator` (validating and defaulting, every enabled kind;
validating for Trainer v2's TrainJob and runtimes with `--enable-scheme TrainJob`)
with their certificates: `Webhooks` wires the server (`server`), the reviews (`review`), the
certificates (`rotator`, `certs`) and the flags (`options`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from trainop_core.api.load import KindLookup
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB
from trainop_core.operator.kube import KubeClient
from trainop_core.operator.metrics import Registry
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.operator.webhook.rotator import MUTATING, VALIDATING, External, SelfManaged
from trainop_core.operator.webhook.server import WebhookServer, webhook_paths
from trainop_core.runtimes.catalog import RuntimeCatalog

__all__ = ["WebhookOptions", "WebhookServer", "Webhooks", "webhook_paths"]


class Webhooks:
    """The webhook server and its certificate loop; `start` binds nothing twice, `ready` is what
    /readyz asks (serving with a certificate)."""

    def __init__(
        self,
        options: WebhookOptions,
        registry: KindLookup,
        client: KubeClient,
        metrics: Registry | None = None,
        trainjobs: bool = False,
        runtimes: Callable[[], RuntimeCatalog] | None = None,
        max_replicas: int = MAX_REPLICAS_PER_JOB,
    ) -> None:
        self.options = options
        self.server = WebhookServer(
            options.host, options.port, registry, metrics, trainjobs, runtimes, max_replicas
        )
        serve = self.server.use_certificate
        self.certificates: SelfManaged | External
        if options.cert_management == "external":
            self.certificates = External(options.cert_dir, serve, options.check_period)
        else:
            self.certificates = SelfManaged(
                client,
                options.own_namespace(),
                options.secret_name,
                options.serving_hosts(),
                (
                    (VALIDATING, options.validating_configuration),
                    (MUTATING, options.mutating_configuration),
                ),
                options.validity,
                serve,
                options.check_period,
            )

    def start(self, stop: threading.Event) -> None:
        """Serve (connections wait for a certificate) and start the certificate loop."""
        self.server.start()
        threading.Thread(
            target=self.certificates.run, args=(stop,), name="webhook-certs", daemon=True
        ).start()

    def ready(self) -> bool:
        return self.server.serving and self.certificates.ready.is_set()

    def stop(self) -> None:
        self.server.stop()
