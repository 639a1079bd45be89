"""A faithful in-process Kubernetes API server for tests (stdlib only; no ``kubernetes``).

with ApiServer() as srv:
    srv.write_kubeconfig(path)
    srv.faults.fail("create", "pods", code=500)
"""

from __future__ import annotations

from .errors import ApiError
from .events import Event, Watcher
from .faults import FaultRule, Faults, Stats
from .resources import ResourceType
from .server import ApiServer
from .store import Store

__all__ = [
    "ApiError",
    "ApiServer",
    "Event",
    "FaultRule",
    "Faults",
    "ResourceType",
    "Stats",
    "Store",
    "Watcher",
]
