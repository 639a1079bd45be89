"""Replica addresses on a Ray cluster: the node IP of the replica's actor and a port probed there.

Both are known before any replica process starts (the supervisor places every replica's actor,
then asks each for its node IP and a free port: two-phase, as Ray Train does), so the planner
computes the same env contract as on Kubernetes, with node IPs where Kubernetes has Service
names. Replicas that share a node share its IP and get distinct ports. An address stays the
replica's as long as its actor lives, so a replica restarted by the planner listens where its
peers expect it.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainop_core.replicas import replica_id


class RayAddressing:
    """The `Addressing` the planner asks on Ray. Pure: answers from the endpoint table."""

    def __init__(self, endpoints: Mapping[str, tuple[str, int]]) -> None:
        self._endpoints = dict(endpoints)

    def _endpoint(self, rtype: str, index: int) -> tuple[str, int]:
        try:
            return self._endpoints[replica_id(rtype, index)]
        except KeyError:
            raise KeyError(f"replica {replica_id(rtype, index)} has not been placed") from None

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        return self._endpoint(rtype, index)[0]

    def port(self, rtype: str, index: int) -> int:
        return self._endpoint(rtype, index)[1]

    @property
    def waits_for_dns(self) -> bool:
        return False


class UnplacedAddressing:
    """Stands in while the job waits for its placement group: the planner may then record the
    job Created and start its clocks, but the pods it plans are not started (their env would
    point nowhere); they are planned again once every replica has its address."""

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        return "0.0.0.0"

    def port(self, rtype: str, index: int) -> int:
        return 0

    @property
    def waits_for_dns(self) -> bool:
        return False
