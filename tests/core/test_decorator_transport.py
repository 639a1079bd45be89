"""The decorator transport's one deadline: a server that trickles any part of its answer (or
never lets the connection finish) is cut off at `timeoutSeconds`, counted from connecting."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from trainop_core.decorators.config import ServerSettings
from trainop_core.decorators.review import DecorationError
from trainop_core.decorators.transport import HttpTransport
from trainop_core.operator.webhook.certs import new_ca

TIMEOUT = 1.0
TRICKLE_FOR = 20.0  # how long the server keeps trickling: far past the deadline
STEP = 0.05  # one byte every STEP: every single read returns well within any socket timeout

# What the server sends at once, then what it sends one byte every STEP.
PHASES = {
    # a TLS record header announcing 16 KiB, then its body a byte at a time: no handshake ends
    "the TLS handshake": (b"\x16\x03\x03\x40\x00", b"\x00"),
    "the status line": (b"HTTP/1.1 200 ", b"O"),
    "the headers": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", b"X-Slow: 1\r\n"),
    "the body": (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"{"),
}


class Trickler:
    """A loopback server that sends `head`, then `unit` a byte at a time until told to stop."""

    def __init__(self, head: bytes, unit: bytes, read_request: bool) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.sent = 0
        self._args = (head, unit, read_request)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        head, unit, read_request = self._args
        conn, _ = self.listener.accept()
        with conn:
            if read_request:
                _read_request(conn)
            conn.sendall(head)
            ends = time.monotonic() + TRICKLE_FOR
            while not self.stop.wait(STEP) and time.monotonic() < ends:
                try:
                    conn.sendall(unit[self.sent % len(unit) :][:1])
                except OSError:
                    return  # the client hung up: what the test wants
                self.sent += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.listener.close()


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return
        data += piece


@pytest.fixture(params=list(PHASES), ids=lambda p: f"a server trickling {p}")
def trickler(request: pytest.FixtureRequest) -> Iterator[tuple[str, Trickler]]:
    head, unit = PHASES[request.param]
    server = Trickler(head, unit, read_request="TLS" not in request.param)
    try:
        yield request.param, server
    finally:
        server.close()


def settings_for(phase: str, port: int) -> ServerSettings:
    data = {"name": "slow", "timeoutSeconds": TIMEOUT, "url": f"http://127.0.0.1:{port}/d"}
    if "TLS" in phase:
        ca = new_ca(timedelta(days=1))
        data |= {"url": f"https://127.0.0.1:{port}/d", "caBundle": _b64(ca.cert_pem)}
    return ServerSettings.model_validate(data)


def test_one_deadline_holds_whatever_part_the_server_trickles(
    trickler: tuple[str, Trickler],
) -> None:
    phase, server = trickler
    started = time.monotonic()
    with pytest.raises(DecorationError) as caught:
        HttpTransport().post(settings_for(phase, server.port), {"review": 1})
    took = time.monotonic() - started
    assert caught.value.reason == "timeout", caught.value
    assert "no answer within 1 s" in str(caught.value)
    assert server.sent >= 3  # it really trickled: each read alone returned in time
    assert took < TIMEOUT + 2.5, f"gave up after {took:.2f} s"  # the margin is the load's


def test_connecting_counts_against_the_deadline() -> None:
    """A listener whose backlog is full: the kernel drops the SYN and connect() waits."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):  # fill the backlog (its size is the kernel's to decide)
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        data = {"name": "full", "timeoutSeconds": TIMEOUT, "url": f"http://127.0.0.1:{port}/"}
        started = time.monotonic()
        with pytest.raises(DecorationError) as caught:
            HttpTransport().post(ServerSettings.model_validate(data), {})
        took = time.monotonic() - started
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
    assert caught.value.reason == "timeout", caught.value
    assert took < TIMEOUT + 2.5, f"gave up after {took:.2f} s"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
