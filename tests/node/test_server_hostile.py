"""The kubelet endpoint against broken or hostile clients (that hold the API server's client
certificate): clear errors naming the parameter, bounded sizes, no traceback."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from trainop_core.node import spdy
from trainop_core.node.pki import KubeletPki
from trainop_core.node.remotecommand import ExecCommand
from trainop_core.node.server import RunningServer, serve_in_thread


class OneContainer:
    """A ContainerRuntime with one running container, ns/pod/c, and an empty log."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> list[Path] | None:
        return (
            [self.log]
            if (namespace, pod, container, previous) == ("ns", "pod", "c", False)
            else None
        )

    def running(self, namespace: str, pod: str, container: str) -> bool:
        return True

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        return ExecCommand(command)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeletPki, RunningServer]]:
    pki = KubeletPki.create(tmp_path_factory.mktemp("pki"))
    context = pki.server_context(*pki.node_serving("n", ["127.0.0.1"]))
    server = serve_in_thread(OneContainer(tmp_path_factory.mktemp("logs") / "c.log"), context)
    yield pki, server
    server.stop()


def exchange(node: tuple[KubeletPki, RunningServer], request: bytes, then: bytes = b"") -> bytes:
    """Send `request` (and `then` after the answer's head); everything read until the server
    closes the connection."""
    pki, server = node
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=20) as raw,
        pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
            if then and b"\r\n\r\n" in answer:
                tls.sendall(then)
                then = b""
        return answer


def get(path: str, headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: n\r\nConnection: close\r\n{headers}\r\n".encode()


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/containerLogs/ns/pod/c?tailLines=-1", 400, "tailLines"),
        ("/containerLogs/ns/pod/c?limitBytes=0", 400, "limitBytes"),
        ("/containerLogs/ns/pod/c?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", 400, "since"),
        ("/containerLogs/ns/pod/c?sinceTime=yesterday", 400, "sinceTime"),
        ("/containerLogs/ns/pod/c?stream=Both", 400, "stream"),
        ("/containerLogs/ns/pod/other", 404, '"other"'),
        ("/containerLogs/ns/pod/c?previous=true", 400, "previous"),
        ("/nowhere", 404, "/nowhere"),
        ("/attach/ns/pod/c", 501, "attach"),
        ("/exec/ns/pod/c?command=true&output=1", 400, "upgrade"),
        ("/exec/ns/pod/c?output=1", 400, "command"),
        ("/exec/ns/pod/c?command=true", 400, "input"),
    ],
)
def test_unusable_requests_get_a_clear_error(
    node: tuple[KubeletPki, RunningServer], path: str, status: int, says: str
) -> None:
    answer = exchange(node, get(path)).decode()
    assert answer.startswith(f"HTTP/1.1 {status} ") and says in answer, answer


def test_oversized_headers_are_refused(node: tuple[KubeletPki, RunningServer]) -> None:
    answer = exchange(node, get("/healthz", "X-Big: " + "a" * 100_000 + "\r\n"))
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_broken_spdy_peer_gets_goaway(node: tuple[KubeletPki, RunningServer]) -> None:
    upgrade = "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
    request = get("/exec/ns/pod/c?command=true&output=1", upgrade)
    request = request.replace(b"Connection: close", b"Connection: Upgrade")
    not_spdy3 = struct.pack(">HHI", 0x8000 | 2, spdy.SYN_STREAM, 10)  # a SPDY/2 control frame
    answer = exchange(node, request, then=not_spdy3)
    head, _, frames = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ") and b"v4.channel.k8s.io" in head
    kind = struct.unpack_from(">HH", frames)[1]
    status = struct.unpack_from(">II", frames, 8)[1]
    assert (kind, status) == (spdy.GOAWAY, spdy.GOAWAY_PROTOCOL_ERROR)


def test_a_follower_that_leaves_is_let_go(node: tuple[KubeletPki, RunningServer]) -> None:
    """The container runs on, but the connection of a ``logs -f`` whose client left ends."""
    pki, server = node
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=20) as raw,
        pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(get("/containerLogs/ns/pod/c?follow=true"))
        assert tls.recv(4096).startswith(b"HTTP/1.1 200 ")
        assert len(server.server._connections) == 1
    deadline = time.monotonic() + 30
    while server.server._connections:
        assert time.monotonic() < deadline, "the follow went on after its client left"
        time.sleep(0.05)
