"""Tiny HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
address. Each is a `ThreadingHTTPServer` in a daemon thread; handlers are plain functions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A route answers (status code, content type, body).
Route = Callable[[], tuple[int, str, str]]
TEXT = "text/plain; charset=utf-8"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`:8080` -> ("", 8080); `127.0.0.1:0` -> an ephemeral port; "0" or "" -> disabled (None)."""
    if address in ("", "0"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address {address!r} is not [host]:port")
    return host.strip("[]"), int(port)


class Endpoints:
    """Serves `routes` on `address` until `stop()`; `port` is the bound port (0 = disabled)."""

    def __init__(self, address: str, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)
        self._server: ThreadingHTTPServer | None = None
        bind = parse_bind_address(address)
        if bind is not None:
            self._server = ThreadingHTTPServer(bind, self._handler_class())
            self._server.daemon_threads = True

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
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                code, ctype, body = route() if route else (404, TEXT, "not found\n")
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        return Handler


def check_route(checks: Mapping[str, Callable[[], bool]]) -> Route:
    """A probe route: 200 `ok` when every named check passes, else 500 listing the failures."""

    def route() -> tuple[int, str, str]:
        failed = [name for name, check in checks.items() if not check()]
        if failed:
            return 500, TEXT, "".join(f"[-]{name} failed\n" for name in failed)
        return 200, TEXT, "ok\n"

    return route
