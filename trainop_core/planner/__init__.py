"""The pure planner: `plan(job, kind, observed, now, addressing, options) -> Plan`."""

from trainop_core.planner.addressing import KubernetesAddressing, replica_name
from trainop_core.planner.plan import plan
from trainop_core.planner.types import (
    METRICS,
    RESTARTS_ANNOTATION,
    Event,
    Observed,
    ObservedPod,
    ObservedService,
    Plan,
    PlanOptions,
)

__all__ = [
    "METRICS",
    "RESTARTS_ANNOTATION",
    "Event",
    "KubernetesAddressing",
    "Observed",
    "ObservedPod",
    "ObservedService",
    "Plan",
    "PlanOptions",
    "plan",
    "replica_name",
]
