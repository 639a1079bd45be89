"""A test API server made ready for the operator: the project's CRDs, and an in-process operator.

Several suites (operator, kubernetes backend, deploy, Flyte connector, trial runner) need the same
two steps; they share them from here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from trainop_core.crds import all_crds
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing import ApiServer


def install_crds(server: ApiServer, registry: KindRegistry, extra: Iterable[Any] = ()) -> None:
    """Create the CRDs of every kind in `registry` (and `extra` ones) in-process, so they are not
    counted as API requests."""
    crds = server.store.resource("customresourcedefinitions", "apiextensions.k8s.io")
    for crd in [*all_crds(registry), *extra]:
        server.store.create(crds, "", crd)


@contextmanager
def running_operator(server: Any, registry: KindRegistry, options: Any = None) -> Iterator[Any]:
    """A Manager running on a daemon thread against `server` (the fake ApiServer, a ControlPlane,
    or a kubernetes ApiClient) for the length of a `with` block (default options: no metrics or
    probe ports)."""
    from trainop_core.operator.manager import Manager
    from trainop_core.operator.options import Options

    options = options or Options(metrics_bind_address="0", health_probe_bind_address="0")
    client = server.api_client() if hasattr(server, "api_client") else server
    manager = Manager(options, registry, api_client=client)
    thread = threading.Thread(target=manager.run, daemon=True, name="operator")
    thread.start()
    try:
        yield manager
    finally:
        manager.shutdown()
        thread.join(timeout=10)
