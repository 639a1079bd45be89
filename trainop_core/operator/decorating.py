"""What the operator gives the decorator servers' step (`trainop_core.decorators.decoration`):
namespace labels for `namespaceSelector` (read from the API server, briefly cached) and metrics
for every call.
"""

from __future__ import annotations

import logging
import threading
import time

from trainop_core.decorators.config import DecoratorConfig
from trainop_core.decorators.decoration import Decorators
from trainop_core.decorators.selectors import namespace_labels
from trainop_core.operator.kube import NAMESPACES, ApiError, KubeClient
from trainop_core.operator.metrics import OperatorMetrics

log = logging.getLogger(__name__)
LABELS_TTL = 30.0  # seconds a namespace's labels are trusted (a server's selector reads them)


def operator_decorators(
    config: DecoratorConfig, client: KubeClient, metrics: OperatorMetrics
) -> Decorators:
    """`config`'s decorators, its servers' selectors reading namespaces through `client`, their
    calls counted in `metrics`."""
    return Decorators.from_config(
        config, labels_of_namespace=NamespaceLabels(client), observer=DecoratorMetrics(metrics)
    )


class NamespaceLabels:
    """A namespace's labels by GET, kept for LABELS_TTL; only asked when a decorator server has a
    namespaceSelector and the job creates pods. A namespace that cannot be read has only its
    name label (logged)."""

    def __init__(self, client: KubeClient, ttl: float = LABELS_TTL) -> None:
        self.client, self.ttl = client, ttl
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def __call__(self, namespace: str) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(namespace)
            if cached is not None and now - cached[0] < self.ttl:
                return cached[1]
        labels = self._read(namespace)
        with self._lock:
            self._cache[namespace] = (now, labels)
        return labels

    def _read(self, namespace: str) -> dict[str, str]:
        try:
            found = self.client.get(NAMESPACES, "", namespace)
        except ApiError as exc:
            log.warning("namespace %s: its labels cannot be read (%s)", namespace, exc)
            return namespace_labels(namespace)
        labels = found.get("metadata", {}).get("labels") or {}
        return {**namespace_labels(namespace), **{str(k): str(v) for k, v in labels.items()}}


class DecoratorMetrics:
    """`CallObserver` on the operator's metrics."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self.metrics = metrics

    def observe_call(self, server: str, seconds: float) -> None:
        self.metrics.decorator_requests.inc(server=server)
        self.metrics.decorator_latency.observe(seconds, server=server)

    def count_failure(self, server: str, reason: str) -> None:
        self.metrics.decorator_failures.inc(server=server, reason=reason)
