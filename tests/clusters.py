"""An in-process operator for every suite that needs one (operator, kubernetes backend, deploy,
Flyte connector, trial runner, KFP components)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainop_core.kinds.table import KindRegistry


@contextmanager
def running_operator(server: Any, registry: KindRegistry, options: Any = None) -> Iterator[Any]:
    """A Manager running on a daemon thread against `server` (a ControlPlane, or a kubernetes
    ApiClient) for the length of a `with` block (default options: no metrics or probe ports)."""
    from trainop_core.operator.manager import Manager
    from trainop_core.operator.options import Options
    from trainop_core.operator.webhook.options import WebhookOptions

    options = options or Options(
        metrics_bind_address="0", health_probe_bind_address="0", webhook=WebhookOptions(port=0)
    )
    client = server.api_client() if hasattr(server, "api_client") else server
    manager = Manager(options, registry, api_client=client)
    thread = threading.Thread(target=manager.run, daemon=True, name="operator")
    thread.start()
    try:
        yield manager
    finally:
        manager.shutdown()
        thread.join(timeout=10)
