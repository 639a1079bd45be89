"""A forward proxy that tunnels with CONNECT, and counts its tunnels, for tests.

What an HTTPS_PROXY or a kubeconfig's `proxy-url` points at: it answers ``CONNECT host:port``
with ``200`` and then copies bytes both ways, so the TLS between client and API server passes
through untouched. ``hosts`` maps names it should reach elsewhere (a name no resolver knows,
``apiserver.trainop.invalid``, reaches 127.0.0.1: a request that got through went through the
proxy). With ``credentials`` it demands ``Proxy-Authorization: Basic`` and answers 407 without.
With ``tls`` (a server SSLContext) it is an https:// proxy: TLS first, CONNECT inside it.
``tunnels`` lists the ``host:port`` of every tunnel opened, in order::

    with ConnectProxy(hosts={"apiserver.trainop.invalid": "127.0.0.1"}) as proxy:
        proxy.url          # http://127.0.0.1:<port>
        proxy.tunnels      # ["apiserver.trainop.invalid:6443", ...]
"""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import socketserver
import ssl
import threading
from types import TracebackType

MAX_HEAD = 16 * 1024  # bytes of a CONNECT request's head


class ConnectProxy:
    """A CONNECT-only proxy on 127.0.0.1 (see the module docstring); thread-safe counters."""

    def __init__(
        self,
        hosts: dict[str, str] | None = None,
        credentials: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.hosts = dict(hosts or {})
        self.tls = tls
        self.credentials = credentials  # "user:password", or "" for none
        self.tunnels: list[str] = []
        self.refused: list[str] = []  # why requests were refused (407, 405, 502)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _note(self, into: list[str], what: str) -> None:
        with self._lock:
            into.append(what)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: ConnectProxy


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        proxy, client = self.server.proxy, self.request
        if proxy.tls is not None:
            try:
                client = self.request = proxy.tls.wrap_socket(client, server_side=True)
            except OSError as exc:
                return proxy._note(proxy.refused, f"TLS {exc}")
        head = _read_head(client)
        lines = head.decode("latin-1").split("\r\n")
        method, _, target = lines[0].partition(" ")
        target = target.rsplit(" ", 1)[0]
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        if method != "CONNECT":
            return self._refuse(405, f"{method} {target}")
        if proxy.credentials and headers.get("proxy-authorization") != (
            "Basic " + base64.b64encode(proxy.credentials.encode()).decode()
        ):
            return self._refuse(407, target)
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection((proxy.hosts.get(host, host), int(port)), 10)
        except (OSError, ValueError):
            return self._refuse(502, target)
        proxy._note(proxy.tunnels, target)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with upstream:
            _pipe(client, upstream)

    def _refuse(self, status: int, what: str) -> None:
        self.server.proxy._note(self.server.proxy.refused, f"{status} {what}")
        extra = 'Proxy-Authenticate: Basic realm="test"\r\n' if status == 407 else ""
        self.request.sendall(
            f"HTTP/1.1 {status} Refused\r\n{extra}Content-Length: 0\r\n\r\n".encode()
        )


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes."""
    peers = {a: b, b: a}
    while True:
        # Bytes a TLS socket has already decrypted are not seen by select: read them first.
        ready: list[socket.socket] = [
            s for s in peers if isinstance(s, ssl.SSLSocket) and s.pending()
        ]
        if not ready:
            ready, _, _ = select.select(list(peers), [], [], 60)
        if not ready:
            continue
        for sock in ready:
            with contextlib.suppress(OSError):
                chunk = sock.recv(65536)
                if chunk:
                    peers[sock].sendall(chunk)
                    continue
            return
