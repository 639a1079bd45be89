"""Job kinds as data: `Kind` descriptions, one module per framework, and the table of them."""

from trainop_core.kinds.base import Addressing, ClusterContext, Kind, ReplicaCounts, Verdict
from trainop_core.kinds.table import KindRegistry, build_registry, builtin_kinds

__all__ = [
    "Addressing",
    "ClusterContext",
    "Kind",
    "KindRegistry",
    "ReplicaCounts",
    "Verdict",
    "build_registry",
    "builtin_kinds",
]
