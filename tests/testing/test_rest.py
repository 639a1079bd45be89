"""The test infrastructure's REST layer (trainop_core.testing.rest), a thin shape over the
operator's connection: its keep-alive and replay rules, and no credential left on disk."""

from __future__ import annotations

import base64
import json
import tempfile
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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


class _LosesWriteAnswers(_DropsIdleConnections):
    """Keeps connections alive; reads a POST and closes the connection without answering."""

    def do_GET(self) -> None:  # http.server naming
        self.requests.append(self.path)
        self._answer(200, {"path": self.path})

    def do_POST(self) -> None:  # http.server naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.requests.append(f"POST {self.path}")
        self.close_connection = True  # the answer is lost


def test_a_write_whose_answer_was_lost_is_not_sent_again() -> None:
    """The operator's replay rule (connection.py), in the test tooling too: a POST on a kept-alive
    connection that breaks before the answer goes out once, and the caller learns it may have
    been applied."""
    _LosesWriteAnswers.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _LosesWriteAnswers)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        rest = Rest(f"http://127.0.0.1:{httpd.server_address[1]}")
        rest.get("/warm")  # the connection is now kept alive: a reused one
        with pytest.raises(RestError) as lost:
            rest.create("/things", {"name": "one"})
        assert lost.value.status == 0 and lost.value.answer_lost
        assert _LosesWriteAnswers.requests == ["/warm", "POST /things"]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_inline_client_credentials_leave_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig's client-certificate-data and client-key-data are loaded without leaving
    the private key in the temporary directory."""
    from trainop_core.operator.webhook.certs import new_ca

    pair = new_ca(timedelta(days=1))  # any certificate and its key
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    config = {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
                    "client-key-data": base64.b64encode(pair.key_pem).decode(),
                },
            }
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    rest = Rest.from_kubeconfig(path)
    assert rest.url == "https://127.0.0.1:6443"
    assert list(temp.iterdir()) == []
