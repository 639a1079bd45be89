"""The node's endpoint spoken to directly (no kube-apiserver), beyond test_server_hostile.py:
malformed HTTP, protocol negotiation, and the SPDY exec path with a terminal (which kubectl only
takes from a terminal): it resizes the terminal and reports the exit code."""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from trainop_core.node import spdy
from trainop_core.node.pki import KubeletPki
from trainop_core.node.remotecommand import ExecCommand
from trainop_core.node.server import RunningServer, serve_in_thread

UPGRADE = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"


class Running:
    """One running container (default/pod-a/main) with an empty log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> list[Path] | None:
        return [self.log] if (pod, container, previous) == ("pod-a", "main", False) else None

    def running(self, namespace: str, pod: str, container: str) -> bool:
        return True

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        return ExecCommand(command, env=dict(os.environ)) if pod == "pod-a" else None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> KubeletPki:
    return KubeletPki.create(tmp_path_factory.mktemp("pki") / "pki")


@pytest.fixture(scope="module")
def server(pki: KubeletPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    context = pki.server_context(*pki.node_serving("n", ["127.0.0.1"]))
    running = serve_in_thread(Running(tmp_path_factory.mktemp("logs") / "main.log"), context)
    yield running
    running.stop()


def connect(server: RunningServer, pki: KubeletPki) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    return pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1")


def ask(server: RunningServer, pki: KubeletPki, request: bytes) -> str:
    """The server's whole answer to `request` (it closes the connection after an error)."""
    with connect(server, pki) as tls:
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
            if answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"0\r\n\r\n"):
                break
        return answer.decode(errors="replace")


def get(path: str, headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: n\r\n{headers}\r\n".encode()


@pytest.mark.parametrize(
    ("request_bytes", "status", "says"),
    [
        (b"NONSENSE\r\n\r\n", 400, "malformed request line"),
        (get("/portForward/default/pod-a"), 501, "portForward is not served"),
        (get("/healthz", "Broken header\r\n"), 400, "malformed header"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_bad_request_gets_a_status_naming_what_is_wrong(
    server: RunningServer, pki: KubeletPki, request_bytes: bytes, status: int, says: str
) -> None:
    answer = ask(server, pki, request_bytes)
    assert answer.startswith(f"HTTP/1.1 {status} "), answer[:300]
    assert says in answer


def test_an_exec_offering_only_unknown_protocols_is_refused(
    server: RunningServer, pki: KubeletPki
) -> None:
    upgrade = UPGRADE + "X-Stream-Protocol-Version: v2.channel.k8s.io\r\n"
    answer = ask(server, pki, get("/exec/default/pod-a/main?command=true&stdout=1", upgrade))
    assert answer.startswith("HTTP/1.1 403") and "v4.channel.k8s.io" in answer


class SpdyClient:
    """Just enough of a SPDY client to drive an exec (streams 1, 3, 5, ... in order)."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self.tls = tls
        self.codec = spdy.HeaderCodec(spdy.Limits())
        self.peer = spdy.HeaderCodec(spdy.Limits())  # decodes what the server compressed
        self.data: dict[int, bytes] = {}
        self.finished: set[int] = set()
        self.buffer = b""

    def open(self, stream_id: int, kind: str) -> None:
        block = self.codec.encode({"streamtype": kind})
        payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + block
        self.tls.sendall(spdy.control_frame(spdy.SYN_STREAM, payload))

    def send(self, stream_id: int, data: bytes, fin: bool = False) -> None:
        self.tls.sendall(spdy.data_frame(stream_id, data, spdy.FLAG_FIN if fin else 0))

    def until_finished(self, stream_id: int) -> None:
        while stream_id not in self.finished:
            first, second = struct.unpack(">II", self._read(8))
            payload = self._read(second & 0xFFFFFF)
            if not first & 0x80000000:
                self.data[first] = self.data.get(first, b"") + payload
                if second >> 24 & spdy.FLAG_FIN:
                    self.finished.add(first)
            elif first & 0xFFFF in (spdy.SYN_REPLY, spdy.HEADERS):
                self.peer.decode(payload[4:])  # keep the decompressor in step

    def _read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.tls.recv(65536)
            assert chunk, f"connection closed; got {self.data}"
            self.buffer += chunk
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out


def test_exec_with_a_terminal_resizes_it_and_reports_the_exit_code(
    server: RunningServer, pki: KubeletPki
) -> None:
    wait_for_size = (
        "import os, sys, time\n"
        "deadline = time.monotonic() + 20\n"
        "while tuple(os.get_terminal_size(0)) != (123, 45) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('size', *os.get_terminal_size(0), 'tty', os.isatty(1))\n"
        "sys.exit(3)\n"
    )
    query = "&".join(["command=python3", "command=-c", f"command={_quote(wait_for_size)}"])
    upgrade = UPGRADE + "X-Stream-Protocol-Version: v5.channel.k8s.io, v4.channel.k8s.io\r\n"
    with connect(server, pki) as tls:
        tls.sendall(get(f"/exec/default/pod-a/main?{query}&stdout=1&stderr=1&tty=1", upgrade))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += tls.recv(1)
        assert head.startswith(b"HTTP/1.1 101") and b"v5.channel.k8s.io" in head
        client = SpdyClient(tls)
        for stream_id, kind in ((1, "error"), (3, "stdout"), (5, "resize")):
            client.open(stream_id, kind)  # no stderr stream with a terminal
        client.send(5, json.dumps({"Width": 123, "Height": 45}).encode())
        client.until_finished(1)
    assert b"size 123 45 tty True" in client.data[3]
    status = json.loads(client.data[1])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
