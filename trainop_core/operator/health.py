"""Tiny HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
address. Each is a `ThreadingHTTPServer` in a daemon thread; handlers are plain functions.

An endpoint may serve HTTPS (`tls`: asked for the current `ssl.SSLContext` at every connection,
so a renewed certificate is served from the next one; the handshake happens in the connection's
own thread, within READ_TIMEOUT) and may put a `guard` before every route (the metrics' API
server authentication and authorization, `metrics_auth.py`). A plain HTTP request to an HTTPS
endpoint fails its handshake and the connection is closed without an answer.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A route answers (status code, content type, body).
Route = Callable[[], tuple[int, str, str]]
# A guard sees (method, path, Authorization header) and answers None (go on) or (code, message).
Guard = Callable[[str, str, str], "tuple[int, str] | None"]
# The serving context for the next connection (None: no certificate, the connection is closed).
TLSContext = Callable[[], "ssl.SSLContext | None"]
TEXT = "text/plain; charset=utf-8"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
READ_TIMEOUT = 10.0  # seconds a connection may take for its handshake and request


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`:8080` -> ("", 8080); `127.0.0.1:0` -> an ephemeral port; "0" or "" -> disabled (None)."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address {address!r} is not [host]:port")
    return host.strip("[]"), int(port)


class Endpoints:
    """Serves `routes` on `address` until `stop()`; `port` is the bound port (0 = disabled).
    `tls`: serve HTTPS with the context it gives; `guard`: asked before every route."""

    def __init__(
        self,
        address: str,
        routes: Mapping[str, Route],
        *,
        tls: TLSContext | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.routes = dict(routes)
        self.guard = guard
        self.tls = tls
        self._server: _Server | None = None
        bind = parse_bind_address(address)
        if bind is not None:
            self._server = _Server(bind, self._handler_class(), tls)

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else 0

    def start(self) -> None:
        if self._server:
            threading.Thread(
                target=self._server.serve_forever, name="http-endpoints", daemon=True
            ).start()

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        routes, guard = self.routes, self.guard

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                refused = (
                    guard("GET", path, self.headers.get("Authorization", "")) if guard else None
                )
                if refused is not None:
                    self._send(refused[0], TEXT, refused[1] + "\n")
                    return
                route = routes.get(path)
                self._send(*(route() if route else (404, TEXT, "not found\n")))

            def _send(self, code: int, ctype: str, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        return Handler


class _Server(ThreadingHTTPServer):
    """IPv4 or IPv6 by the host's form; with `tls`, each connection is handshaken in its own
    thread (a slow or plain-HTTP client holds up no other)."""

    daemon_threads = True

    def __init__(
        self, bind: tuple[str, int], handler: type[BaseHTTPRequestHandler], tls: TLSContext | None
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        self.tls = tls
        super().__init__(bind, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        context = self.tls()
        if context is None:
            return
        request.settimeout(READ_TIMEOUT)
        try:
            conn = context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):  # not TLS (plain HTTP), or a failed handshake
            return
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


def check_route(checks: Mapping[str, Callable[[], bool]]) -> Route:
    """A probe route: 200 `ok` when every named check passes, else 500 listing the failures."""

    def route() -> tuple[int, str, str]:
        failed = [name for name, check in checks.items() if not check()]
        if failed:
            return 500, TEXT, "".join(f"[-]{name} failed\n" for name in failed)
        return 200, TEXT, "ok\n"

    return route
