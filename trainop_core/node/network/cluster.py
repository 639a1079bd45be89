"""One try-it cluster's pod network: a bridge in a namespace of its own, a namespace per pod.

The bridge namespace (the "hub") holds the pod network's gateway address, cluster DNS on it, and
local routes for the service CIDRs where the service proxy listens. Each pod's namespace has a
veth into the bridge, an address from the pod CIDR and a default route via the gateway. The host's
own network namespace is never changed: the hub reaches the host (the API server on 127.0.0.1)
only through sockets this process opens in the host namespace. See docs/process-node-network.md.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import socket
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from trainop_core.node.network import netns
from trainop_core.node.network.cache import ClusterView
from trainop_core.node.network.dns import DnsServer
from trainop_core.node.network.errors import NetworkError
from trainop_core.node.network.proxy import Address, ServiceProxy
from trainop_core.node.network.sandbox import Sandbox, SandboxSpec, hosts_file, resolv_conf
from trainop_core.operator.connection import Connection
from trainop_core.operator.kube import KubeClient

_instances = itertools.count()
SERVICE_CIDRS_PATH = "/apis/networking.k8s.io/v1/servicecidrs"


class ClusterNetwork:
    """The pod network of one cluster, read from the API at `api` (a Connection, as
    ``trainop_core.testing.rest.Rest.connection``, or a kubeconfig path).

    `service_cidrs`: where ClusterIP Services live (None: read the cluster's ServiceCIDRs).
    `euid` is a seam for tests: who this process runs as."""

    def __init__(
        self,
        api: Connection | str | os.PathLike[str],
        *,
        pod_cidr: str = "10.244.0.0/16",
        service_cidrs: Sequence[str] | None = None,
        zone: str = "cluster.local",
        sync_timeout: float = 60.0,
        euid: Callable[[], int] = os.geteuid,
    ) -> None:
        self.connection = api if isinstance(api, Connection) else _kubeconfig(api)
        self.pod_network = ipaddress.IPv4Network(pod_cidr)
        self.gateway = str(self.pod_network.network_address + 1)
        self.zone, self.sync_timeout, self._euid = zone, sync_timeout, euid
        self._service_cidrs = list(service_cidrs) if service_cidrs is not None else None
        self.owner = f"{os.getpid()}-{next(_instances)}"
        self.hub = f"{netns.PREFIX}{self.owner}-hub"
        self.state_dir = netns.STATE_DIR / self.owner
        self._lock = threading.Lock()
        self._sandboxes: dict[str, Sandbox] = {}
        self._making: dict[str, threading.Lock] = {}  # per uid: one sandbox made at a time
        self._used: set[int] = set()
        self._cursor, self._seq = 2, itertools.count()
        self._view: ClusterView | None = None
        self._dns: DnsServer | None = None
        self._proxy: ServiceProxy | None = None

    @property
    def dns_ip(self) -> str:
        """Where pods' resolv.conf points: cluster DNS, on the gateway address."""
        return self.gateway

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ClusterNetwork:
        """Make the hub, start the caches, DNS and the service proxy. Raises NetworkUnavailable
        (not root, tools missing) before changing anything; otherwise NetworkError or TimeoutError,
        having removed what it made. Also removes what crashed owners left behind."""
        netns.preflight(self._euid)
        netns.remove_stale()
        try:
            client = KubeClient(self.connection, qps=50, burst=100)
            self._make_hub(self._service_cidrs or self._read_service_cidrs(client))
            self._proxy = ServiceProxy(
                _NoServices(), self._listen, self._connect, _server(self.connection)
            )
            self._view = ClusterView(client, on_services=self._proxy.changed)
            self._proxy.source = self._view
            self._view.start(self.sync_timeout)
            self._start_dns(self._view)
            self._proxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A connection to a pod from the hub, which reaches every pod's address (a PodNetwork's
        way for probes)."""
        return netns.connect_in(self.hub, host, port, timeout)

    def stop(self) -> None:
        """Close every sandbox and remove the hub (idempotent; processes still in a pod's
        namespace lose its network)."""
        for part in (self._proxy, self._dns, self._view):
            if part is not None:
                part.stop()
        self._proxy = self._dns = self._view = None
        with self._lock:
            sandboxes = list(self._sandboxes.values())
        for sandbox in sandboxes:
            sandbox.close()
        netns.delete_netns(self.hub)
        netns.remove_state(self.state_dir)

    def __enter__(self) -> ClusterNetwork:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- sandboxes -----------------------------------------------------------------------------
    def sandbox(
        self,
        namespace: str,
        pod_name: str,
        uid: str,
        hostname: str | None = None,
        subdomain: str | None = None,
    ) -> Sandbox:
        """The pod's network namespace with its own IP, made on first call (the same Sandbox
        for the same `uid` after that, also when asked from several threads at once). Raises
        NetworkError, leaving nothing half-made."""
        with self._lock:
            making = self._making.setdefault(uid, threading.Lock())
        with making:
            with self._lock:
                if uid in self._sandboxes:
                    return self._sandboxes[uid]
                index, address = next(self._seq), self._allocate()
            spec = SandboxSpec(namespace, pod_name, uid, pod_hostname(hostname or pod_name),
                               subdomain or "")  # fmt: skip
            sandbox = self._make(spec, index, address)
            with self._lock:
                self._sandboxes[uid] = sandbox
            return sandbox

    def _make(self, spec: SandboxSpec, index: int, address: str) -> Sandbox:
        name = f"{netns.PREFIX}{self.owner}-p{index}"
        uts = self.state_dir / f"uts-p{index}"
        sandbox = Sandbox(spec, address, name, uts, f"vp{index}", self._release)
        try:
            self._plumb(sandbox)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _plumb(self, sandbox: Sandbox) -> None:
        plumb(sandbox, self.hub, self.gateway, self.pod_network.prefixlen, self.zone)

    def _release(self, sandbox: Sandbox) -> None:
        """Undo a sandbox (Sandbox.close calls this once)."""
        with contextlib.suppress(NetworkError):  # not made yet, or the hub is gone already
            netns.ip("link", "del", sandbox.hub_link, netns=self.hub)
        netns.delete_netns(sandbox.netns)
        netns.drop_uts(sandbox.uts)
        with self._lock:
            if self._sandboxes.get(sandbox.spec.uid) is sandbox:
                self._sandboxes.pop(sandbox.spec.uid)
                self._making.pop(sandbox.spec.uid, None)
            self._used.discard(int(ipaddress.IPv4Address(sandbox.ip)))

    def _allocate(self) -> str:
        """The next free pod address after the last one given (so a freed one is reused late)."""
        base, size = int(self.pod_network.network_address), self.pod_network.num_addresses
        for step in range(size):
            offset = (self._cursor + step - 2) % (size - 3) + 2  # skip network, gateway, broadcast
            if base + offset not in self._used:
                self._cursor = offset + 1
                self._used.add(base + offset)
                return str(ipaddress.IPv4Address(base + offset))
        raise NetworkError(f"pod network {self.pod_network} is full")

    # --- the hub -------------------------------------------------------------------------------
    def _make_hub(self, service_cidrs: list[str]) -> None:
        netns.add_netns(self.hub)
        netns.ip(netns=self.hub, batch=[
            "link set lo up",
            "link add br0 type bridge",
            f"addr add {self.gateway}/{self.pod_network.prefixlen} dev br0",
            "link set br0 up",
            *(f"route add local {cidr} dev lo" for cidr in service_cidrs),
        ])  # fmt: skip

    def _read_service_cidrs(self, client: KubeClient) -> list[str]:
        items = client.request("GET", SERVICE_CIDRS_PATH).get("items") or []
        cidrs = [
            c for item in items for c in (item.get("spec") or {}).get("cidrs") or [] if ":" not in c
        ]
        if not cidrs:
            raise NetworkError(
                f"the cluster has no IPv4 ServiceCIDR ({SERVICE_CIDRS_PATH}); pass service_cidrs"
            )
        return cidrs

    def _start_dns(self, view: ClusterView) -> None:
        udp = self._hub_socket(socket.SOCK_DGRAM)
        tcp = self._hub_socket(socket.SOCK_STREAM)
        udp.bind((self.dns_ip, 53))
        tcp.bind((self.dns_ip, 53))
        tcp.listen(64)
        self._dns = DnsServer(udp, tcp, view, self.zone)
        self._dns.start()

    def _hub_socket(self, kind: socket.SocketKind) -> socket.socket:
        with netns.entered(self.hub):
            sock = socket.socket(socket.AF_INET, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return sock

    def _listen(self, address: Address) -> socket.socket:
        sock = self._hub_socket(socket.SOCK_STREAM)
        try:
            sock.bind(address)
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        return sock

    def _connect(self, address: Address) -> socket.socket:
        if ipaddress.IPv4Address(address[0]) in self.pod_network:
            return self._hub_socket(socket.SOCK_STREAM)
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the host's: the API server


def plumb(sandbox: Sandbox, hub: str, gateway: str, prefixlen: int, zone: str) -> None:
    """Make `sandbox`'s namespace, its veth into `hub`'s bridge, its address and default route
    via `gateway` (also its DNS server), its resolv.conf, hosts file and hostname. Used by
    whoever makes sandboxes on a hub: the hub's owner, or a process node joining it."""
    netns.add_netns(sandbox.netns)
    link = sandbox.hub_link
    netns.ip(netns=hub, batch=[
        f"link add {link} type veth peer name eth0 netns {sandbox.netns}",
        f"link set {link} master br0",
        f"link set {link} up",
    ])  # fmt: skip
    netns.ip(netns=sandbox.netns, batch=[
        "link set lo up",
        f"addr add {sandbox.ip}/{prefixlen} dev eth0",
        "link set eth0 up",
        f"route add default via {gateway}",
    ])  # fmt: skip
    netns.write_etc(sandbox.netns, {
        "resolv.conf": resolv_conf(sandbox.spec.namespace, zone, gateway),
        "hosts": hosts_file(sandbox.spec, sandbox.ip, zone),
    })  # fmt: skip
    netns.new_uts(sandbox.uts, sandbox.spec.hostname)


class _NoServices:
    def all_services(self) -> list[dict[str, object]]:
        return []

    def endpoint_slices(self, namespace: str, service: str) -> list[dict[str, object]]:
        return []


def _kubeconfig(path: str | os.PathLike[str]) -> Connection:
    from trainop_core.operator.kubeconfig import kubeconfig_connection

    return kubeconfig_connection(Path(path), environ=os.environ)


def _server(connection: Connection) -> Address | None:
    """The API server's IPv4 address and port, as this process reaches it."""
    url = urllib.parse.urlsplit(connection.server)
    if not url.hostname:
        return None
    port = url.port or (443 if url.scheme == "https" else 80)
    infos = socket.getaddrinfo(url.hostname, port, socket.AF_INET, socket.SOCK_STREAM)
    return (str(infos[0][4][0]), port) if infos else None


def pod_hostname(name: str) -> str:
    """A pod's hostname as the kubelet makes it: at most 63 characters, not ending in - or ."""
    return name[:63].rstrip("-.") or "pod"
