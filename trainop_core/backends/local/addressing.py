"""Replica addresses on this machine: every replica is 127.0.0.1 with a port of its own.

Ports are chosen once, when the job is created, and kept in `local.json`, so a replica restarted
by the planner listens where its peers expect it. Allocation holds `$TRAINOP_HOME/ports.lock` and
skips every port another job already holds, so concurrent jobs never collide.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping

from trainop_core.backends.local.state import StateRoot, flocked
from trainop_core.errors import DamagedJobError
from trainop_core.replicas import replica_id

LOCALHOST = "127.0.0.1"


class LocalAddressing:
    """The `Addressing` the planner asks on this machine. Pure: answers from the port table."""

    def __init__(self, ports: Mapping[str, int]) -> None:
        self._ports = dict(ports)

    def host(self, rtype: str, index: int, *, fqdn: bool = False) -> str:
        return LOCALHOST

    def port(self, rtype: str, index: int) -> int:
        try:
            return self._ports[replica_id(rtype, index)]
        except KeyError:
            raise KeyError(f"no port allocated for replica {replica_id(rtype, index)}") from None

    @property
    def waits_for_dns(self) -> bool:
        return False

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._ports)


def _ports_in_use(root: StateRoot) -> set[int]:
    used: set[int] = set()
    for job_dir in root.all_jobs():
        try:
            used.update(job_dir.read_local()["ports"].values())
        except DamagedJobError:  # its ports are no job's any more: one damaged job blocks none
            continue
    return used


def _free_port(avoid: set[int]) -> int:
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOCALHOST, 0))
            port: int = sock.getsockname()[1]
        if port not in avoid:
            return port
    raise OSError("could not find a free TCP port on 127.0.0.1")


def allocate_ports(root: StateRoot, replicas: Iterable[str]) -> dict[str, int]:
    """A distinct free port for each replica id, avoiding ports held by other jobs.

    The caller must hold `root.ports_lock` until the new job's `local.json` is in place.
    """
    avoid = _ports_in_use(root)
    ports: dict[str, int] = {}
    for replica in replicas:
        port = _free_port(avoid)
        avoid.add(port)
        ports[replica] = port
    return ports


__all__ = ["LOCALHOST", "LocalAddressing", "allocate_ports", "flocked", "replica_id"]  # re-exported
