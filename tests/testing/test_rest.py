"""The stdlib REST client of the test infrastructure (trainop_core.testing.rest)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainop_core.testing.rest import Rest, RestError


class _DropsIdleConnections(BaseHTTPRequestHandler):
    """Answers, keeps the connection open as HTTP/1.1 does, then drops it (an idle timeout)."""

    protocol_version = "HTTP/1.1"
    requests: list[str] = []  # noqa: RUF012  # one server per test: reset by the fixture

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # http.server naming
        self.requests.append(self.path)
        if self.path == "/missing":
            self._answer(404, {"kind": "Status", "reason": "NotFound", "message": "no such"})
        else:
            self._answer(200, {"path": self.path, "auth": self.headers.get("Authorization")})
        self.close_connection = True  # without telling the client: it will try to reuse it

    def _answer(self, code: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    _DropsIdleConnections.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _DropsIdleConnections)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_a_kept_alive_connection_the_server_closed_is_replaced(
    server: ThreadingHTTPServer,
) -> None:
    rest = Rest(f"http://127.0.0.1:{server.server_address[1]}", token="t")
    assert rest.get("/one") == {"path": "/one", "auth": "Bearer t"}
    assert rest.get("/two")["path"] == "/two"  # first try on the dropped connection fails
    assert _DropsIdleConnections.requests == ["/one", "/two"]


def test_an_error_answer_carries_the_status_reason_and_message(
    server: ThreadingHTTPServer,
) -> None:
    rest = Rest(f"http://127.0.0.1:{server.server_address[1]}")
    with pytest.raises(RestError) as missing:
        rest.get("/missing")
    assert (missing.value.status, missing.value.reason, missing.value.message) == (
        404,
        "NotFound",
        "no such",
    )


def test_no_answer_at_all_is_status_zero() -> None:
    with pytest.raises(RestError) as refused:
        Rest("http://127.0.0.1:9").get("/")  # the discard port: nothing listens there
    assert refused.value.status == 0
