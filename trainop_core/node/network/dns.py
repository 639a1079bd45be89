"""Cluster DNS: answers A queries for cluster names over UDP and TCP (the latter for long answers).

Names outside the cluster zone are NXDOMAIN: pods have no way out of the cluster network (see
docs/process-node-network.md), so forwarding would only delay a failure. Hostile packets are
answered FORMERR or dropped in bounded time (dnswire); a TCP client gets a few seconds, a bounded
message size and a bounded number of concurrent connections.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading

from trainop_core.node.network import dnswire
from trainop_core.node.network.records import View, addresses

log = logging.getLogger(__name__)
TTL = 5  # seconds: pods come and go; a resolver should ask again soon
TCP_TIMEOUT = 5.0
MAX_TCP_CLIENTS = 32


def answer(data: bytes, view: View, zone: str, limit: int = dnswire.UDP_LIMIT) -> bytes | None:
    """The reply to one packet, or None when it deserves none (not a query at all)."""
    try:
        query = dnswire.parse_query(data)
    except dnswire.FormatError:
        is_query = len(data) >= 12 and not data[2] & 0x80
        return dnswire.error(data, dnswire.FORMERR) if is_query else None
    if query.opcode != 0:
        return dnswire.response(query, dnswire.NOTIMP, [], TTL, limit)
    if query.qclass not in (dnswire.IN, dnswire.ANY):
        return dnswire.response(query, dnswire.REFUSED, [], TTL, limit)
    found = addresses(query.name, view, zone)
    if found is None:
        return dnswire.response(query, dnswire.NXDOMAIN, [], TTL, limit)
    wanted = found if query.qtype in (dnswire.A, dnswire.ANY) else []
    return dnswire.response(query, dnswire.NOERROR, wanted, TTL, limit)


class DnsServer:
    """Serves `view` on a bound UDP socket and a listening TCP socket until `stop()`."""

    def __init__(self, udp: socket.socket, tcp: socket.socket, view: View, zone: str) -> None:
        self.udp, self.tcp, self.view, self.zone = udp, tcp, view, zone
        self._stopped = threading.Event()
        self._clients = threading.BoundedSemaphore(MAX_TCP_CLIENTS)
        self.udp.settimeout(1.0)
        self.tcp.settimeout(1.0)

    def start(self) -> None:
        for name, loop in (("udp", self._serve_udp), ("tcp", self._serve_tcp)):
            threading.Thread(target=loop, name=f"cluster-dns-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        for sock in (self.udp, self.tcp):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _serve_udp(self) -> None:
        while not self._stopped.is_set():
            try:
                data, peer = self.udp.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            reply = self._answer(data, dnswire.UDP_LIMIT)
            if reply is not None:
                with contextlib.suppress(OSError):
                    self.udp.sendto(reply, peer)

    def _serve_tcp(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._clients.acquire(blocking=False):
                conn.close()  # too many at once: a resolver retries
                continue
            threading.Thread(target=self._serve_client, args=(conn,), daemon=True).start()

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(TCP_TIMEOUT)
            while not self._stopped.is_set():
                size = struct.unpack("!H", _read(conn, 2))[0]
                reply = self._answer(_read(conn, size), 65535)
                if reply is None:
                    return
                conn.sendall(struct.pack("!H", len(reply)) + reply)
        except (OSError, EOFError):
            return
        finally:
            conn.close()
            self._clients.release()

    def _answer(self, data: bytes, limit: int) -> bytes | None:
        try:
            return answer(data, self.view, self.zone, limit)
        except Exception:  # a bug answering one query must not stop the server
            log.exception("cluster DNS: answering failed")
            return dnswire.error(data, dnswire.SERVFAIL) if len(data) >= 2 else None


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data
