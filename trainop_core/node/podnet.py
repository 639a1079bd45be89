"""A process node's pods on the cluster network: sandboxes on a hub another process owns.

The try-it cluster (or a test) runs one :class:`~trainop_core.node.network.ClusterNetwork` (the
hub's bridge, cluster DNS and the Service proxy); each node, a process of its own, joins it:
its pods get network namespaces with a veth into the hub's bridge and addresses from the node's
own range (its ``spec.podCIDR``, a slice of the pod network), as a CNI plugin gives each node a
slice. :class:`HubAddress` is what the owner tells a node (:meth:`HubAddress.args` /
:meth:`HubAddress.from_args`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import socket
import threading
from dataclasses import dataclass

from trainop_core.node.network import Sandbox, netns
from trainop_core.node.network.cluster import plumb
from trainop_core.node.network.errors import NetworkError
from trainop_core.node.network.sandbox import SandboxSpec


@dataclass(frozen=True)
class HubAddress:
    """Where a node's pods join the cluster network, and the node's slice of it."""

    hub: str  # the hub's network namespace
    pod_network: str  # the whole pod network, e.g. 10.244.0.0/16
    pod_range: str  # this node's slice, e.g. 10.244.1.0/24 (its spec.podCIDR)
    zone: str = "cluster.local"

    @property
    def gateway(self) -> str:
        return str(ipaddress.IPv4Network(self.pod_network).network_address + 1)

    def args(self) -> list[str]:
        return [f"--network-hub={self.hub}", f"--pod-network={self.pod_network}",
                f"--pod-cidr={self.pod_range}", f"--cluster-domain={self.zone}"]  # fmt: skip


def node_slice(pod_network: str, index: int, prefix: int = 24) -> str:
    """Node `index`'s slice of the pod network (slice 0 holds the gateway: nodes start at 1)."""
    subnets = ipaddress.IPv4Network(pod_network).subnets(new_prefix=prefix)
    return str(next(itertools.islice(subnets, index + 1, None)))


class NodeNetwork:
    """The pods of one node on the hub at `address` (a PodNetwork)."""

    def __init__(self, address: HubAddress) -> None:
        self.address = address
        self.range = ipaddress.IPv4Network(address.pod_range)
        self.prefixlen = ipaddress.IPv4Network(address.pod_network).prefixlen
        self.owner = f"{os.getpid()}-0"  # netns names carry it: a dead node's are stale
        self.state_dir = netns.STATE_DIR / self.owner
        self.slot = int(self.range.network_address) >> (32 - self.range.prefixlen) & 0xFFF
        self._lock = threading.Lock()
        self._sandboxes: dict[str, Sandbox] = {}
        self._used: set[str] = set()
        self._seq = itertools.count()

    def start(self) -> NodeNetwork:
        """Check this process may make namespaces; remove what dead owners (an earlier run of
        this node) left. Raises NetworkUnavailable, saying why."""
        netns.preflight()
        netns.remove_stale()
        if not (netns.NETNS_DIR / self.address.hub).exists():
            raise NetworkError(f"no cluster network hub {self.address.hub!r} on this machine")
        return self

    def sandbox(
        self, namespace: str, pod_name: str, uid: str, hostname: str, subdomain: str
    ) -> Sandbox:
        with self._lock:
            if uid in self._sandboxes:
                return self._sandboxes[uid]
            index, ip = next(self._seq), self._allocate()
        spec = SandboxSpec(namespace, pod_name, uid, hostname or pod_name, subdomain or "")
        name = f"{netns.PREFIX}{self.owner}-p{index}"
        uts = self.state_dir / f"uts-p{index}"
        link = f"n{self.slot}p{index}"[:15]
        sandbox = Sandbox(spec, ip, name, uts, link, self._release)
        try:
            plumb(sandbox, self.address.hub, self.address.gateway, self.prefixlen,
                  self.address.zone)  # fmt: skip
        except BaseException:
            sandbox.close()
            raise
        with self._lock:
            self._sandboxes[uid] = sandbox
        return sandbox

    def _allocate(self) -> str:
        gateway = self.address.gateway
        for host in self.range.hosts():
            text = str(host)
            if text != gateway and text not in self._used:
                self._used.add(text)
                return text
        raise NetworkError(f"node pod range {self.range} is full")

    def _release(self, sandbox: Sandbox) -> None:
        hub = self.address.hub
        if (netns.NETNS_DIR / hub).exists():
            with contextlib.suppress(NetworkError):  # gone with the pod's namespace
                netns.ip("link", "del", sandbox.hub_link, netns=hub)
        netns.delete_netns(sandbox.netns)
        netns.drop_uts(sandbox.uts)
        with self._lock:
            self._sandboxes.pop(sandbox.spec.uid, None)
            self._used.discard(sandbox.ip)

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A connection to a pod from the hub, which reaches every pod's address (a PodNetwork's
        way for probes)."""
        return netns.connect_in(self.address.hub, host, port, timeout)

    def stop(self) -> None:
        with self._lock:
            sandboxes = list(self._sandboxes.values())
        for sandbox in sandboxes:
            sandbox.close()
        netns.remove_state(self.state_dir)
