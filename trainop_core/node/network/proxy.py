"""ClusterIP Services in user space: a listener on every `<clusterIP>:<port>` (TCP) that splices
each connection to a ready endpoint, picked at random per connection as kube-proxy does.

The listeners live in the cluster network's namespace, whose local routes cover the service
CIDRs, so pods reach a Service at the very address the API gave it. The `kubernetes` Service in
`default` leads to the API server this network reads (its EndpointSlice would name a loopback
address, which the API refuses to publish): in-pod clients with a service-account token work.
"""

from __future__ import annotations

import contextlib
import logging
import random
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Protocol

from trainop_core.node.network.records import ready_endpoints
from trainop_core.operator.kube import Obj

log = logging.getLogger(__name__)
Address = tuple[str, int]
CONNECT_TIMEOUT = 5.0
CHUNK = 256 * 1024
MAX_CONNECTIONS = 1024  # proxied at once (two threads each); more are refused until some end


class ServiceSource(Protocol):
    """The cached Services and EndpointSlices (thread-safe, no I/O)."""

    def all_services(self) -> list[Obj]: ...

    def endpoint_slices(self, namespace: str, service: str) -> list[Obj]: ...


Route = tuple[str, str, str, int]  # namespace, service, port name, port


class ServiceProxy:
    """`listen(address)` makes a listening socket where pods can reach it; `connect(address)`
    makes an unconnected socket from which that endpoint is reachable."""

    def __init__(
        self,
        source: ServiceSource,
        listen: Callable[[Address], socket.socket],
        connect: Callable[[Address], socket.socket],
        apiserver: Address | None,
    ) -> None:
        self.source, self.listen, self.connect, self.apiserver = source, listen, connect, apiserver
        self._selector = selectors.DefaultSelector()
        self._listeners: dict[Address, tuple[socket.socket, Route]] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopped = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> None:
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._reconcile()
        threading.Thread(target=self._loop, name="service-proxy", daemon=True).start()

    def changed(self) -> None:
        """Services changed: reconcile listeners soon (quick, any thread)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def stop(self) -> None:
        self._stopped.set()
        self.changed()
        with self._lock:
            opened = list(self._open)
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @property
    def addresses(self) -> list[Address]:
        return sorted(self._listeners)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            for key, _ in self._selector.select(timeout=5.0):
                if key.fileobj is self._wake_r:
                    self._wake_r.recv(4096)
                    self._reconcile()
                else:
                    self._accept(key.data)
        for sock, _ in self._listeners.values():
            sock.close()
        self._listeners.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _reconcile(self) -> None:
        if self._stopped.is_set():
            return
        wanted = desired_listeners(self.source.all_services())
        for address in [a for a in self._listeners if a not in wanted]:
            sock, _ = self._listeners.pop(address)
            self._selector.unregister(sock)
            sock.close()
        for address, route in wanted.items():
            if address not in self._listeners:
                self._open_listener(address, route)
            else:
                sock, _ = self._listeners[address]
                self._listeners[address] = (sock, route)
                self._selector.modify(sock, selectors.EVENT_READ, address)

    def _open_listener(self, address: Address, route: Route) -> None:
        try:
            sock = self.listen(address)
        except OSError as exc:
            log.warning("service proxy: cannot listen on %s:%d: %s", *address, exc)
            return
        sock.setblocking(False)
        self._listeners[address] = (sock, route)
        self._selector.register(sock, selectors.EVENT_READ, address)

    def _accept(self, address: Address) -> None:
        sock, route = self._listeners[address]
        try:
            client, _ = sock.accept()
        except OSError:
            return
        if not self._slots.acquire(blocking=False):
            client.close()
            return
        client.setblocking(True)
        threading.Thread(target=self._serve_counted, args=(client, route), daemon=True).start()

    def _serve_counted(self, client: socket.socket, route: Route) -> None:
        try:
            self._serve(client, route)
        finally:
            self._slots.release()

    def _serve(self, client: socket.socket, route: Route) -> None:
        upstream = self._dial(route)
        if upstream is None:
            client.close()  # no ready endpoint: the client sees the connection end
            return
        with self._lock:
            self._open.update((client, upstream))
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        with self._lock:
            self._open.difference_update((client, upstream))
        client.close()
        upstream.close()

    def _dial(self, route: Route) -> socket.socket | None:
        candidates = self.backends(route)
        random.shuffle(candidates)
        for address in candidates[:3]:
            sock = self.connect(address)
            try:
                sock.settimeout(CONNECT_TIMEOUT)
                sock.connect(address)
                sock.settimeout(None)
                return sock
            except OSError as exc:
                log.info("service proxy: %s:%d unreachable: %s", *address, exc)
                sock.close()
        return None

    def backends(self, route: Route) -> list[Address]:
        """Where a connection to this Service port may go now."""
        namespace, service, port_name, _ = route
        if (namespace, service) == ("default", "kubernetes") and self.apiserver:
            return [self.apiserver]
        return endpoint_addresses(self.source.endpoint_slices(namespace, service), port_name)


def desired_listeners(services: list[Obj]) -> dict[Address, Route]:
    """Every TCP `<clusterIP>:<port>` of every Service that has a cluster IP."""
    wanted: dict[Address, Route] = {}
    for service in services:
        meta, spec = service.get("metadata") or {}, service.get("spec") or {}
        cluster_ip = spec.get("clusterIP") or "None"
        if cluster_ip == "None" or spec.get("type") == "ExternalName":
            continue
        for port in spec.get("ports") or []:
            if port.get("protocol", "TCP") == "TCP" and port.get("port"):
                route = (
                    meta.get("namespace", ""),
                    meta.get("name", ""),
                    port.get("name", ""),
                    int(port["port"]),
                )
                wanted[(cluster_ip, int(port["port"]))] = route
    return wanted


def endpoint_addresses(slices: list[Obj], port_name: str) -> list[Address]:
    """Ready endpoints' (address, port) for the Service port named `port_name`."""
    found: list[Address] = []
    for eps in slices:
        ports = [p for p in eps.get("ports") or [] if (p.get("name") or "") == port_name]
        if ports and ports[0].get("port") and ports[0].get("protocol", "TCP") == "TCP":
            found += [(a, int(ports[0]["port"])) for _, a in ready_endpoints([eps])]
    return found


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction until EOF, then pass the EOF on (half-close)."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    try:
        while n := source.recv_into(buffer):
            sink.sendall(view[:n])
    except OSError:  # reset or shut down by stop(): end both directions
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
