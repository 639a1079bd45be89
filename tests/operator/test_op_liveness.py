"""A dead connection to the API server is noticed within 45 s (see liveness.py): the defaults
guarantee it for watches and requests, every socket has TCP keepalive, and a request on a
half-open connection (the fault proxy's stall) gives up within its read timeout."""

from __future__ import annotations

import argparse
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
from opkit import Cluster

from trainop_core.operator.connection import Connection
from trainop_core.operator.informer import Informer, RestListWatch
from trainop_core.operator.kube import DEFAULT_TIMEOUT, PODS, ApiError, KubeClient
from trainop_core.operator.liveness import (
    DEAD_CONNECTION_BOUND,
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE,
    KEEPALIVE_INTERVAL,
    dead_watch_bound,
)
from trainop_core.operator.options import add_flags, options_from_args


class _EmptyStream:
    def close(self) -> None:
        pass


class _RecordingClient:
    """Stands in for KubeClient: records each watch's server-side timeout and the client's read
    timeout; every watch ends at once, empty, as a server ends one at its timeout."""

    def __init__(self, watches: int, stop: threading.Event) -> None:
        self.seen: list[tuple[int, float]] = []
        self.watches, self.stop = watches, stop

    def list(self, *args: Any, **query: Any) -> dict[str, Any]:
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    def stream_lines(
        self, path: str, query: dict[str, Any], timeout: tuple[float, float]
    ) -> tuple[_EmptyStream, Iterator[bytes]]:
        self.seen.append((int(query["timeoutSeconds"]), timeout[1]))
        if len(self.seen) >= self.watches:
            self.stop.set()
        return _EmptyStream(), iter(())


def test_the_default_flags_give_a_silent_watch_up_within_45_seconds_and_never_an_idle_one() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    options = options_from_args(parser.parse_args([]))
    stop = threading.Event()
    client = _RecordingClient(300, stop)
    lw = RestListWatch(cast(KubeClient, client), PODS, read_margin=options.watch_read_timeout)
    Informer("pods", lw, min_watch_timeout=options.watch_timeout).run(stop)
    assert len(client.seen) == 300
    longest = max(read for _, read in client.seen)
    assert longest <= DEAD_CONNECTION_BOUND, f"a dead watch goes unnoticed for {longest} s"
    assert dead_watch_bound(options.watch_timeout, options.watch_read_timeout) <= 45
    # The server ends a healthy idle watch (its only bytes) before the client gives it up.
    assert all(read > server for server, read in client.seen)
    assert DEFAULT_TIMEOUT[1] <= DEAD_CONNECTION_BOUND  # ordinary requests


class _Empty(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def plain_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Empty)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_connection_to_the_server_has_tcp_keepalive(plain_server: str) -> None:
    stream = Connection(plain_server, None).stream("/", {}, DEFAULT_TIMEOUT)
    try:
        sock = stream.conn.sock
        assert sock is not None
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; other platforms keep their own figures
            found = [sock.getsockopt(socket.IPPROTO_TCP, o) for o in
                     (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)]  # fmt: skip
            assert found == [KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT]
    finally:
        stream.close()


def test_a_request_on_a_half_open_connection_gives_up_within_its_read_timeout(
    cluster: Cluster,
) -> None:
    client = KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    path = PODS.path(cluster.namespace)
    client.list(PODS, cluster.namespace)  # a kept-alive connection, idle now
    assert cluster.proxy.stall() == 1
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        client.request("GET", path, timeout=(DEFAULT_TIMEOUT[0], 1.0))
    elapsed = time.monotonic() - started
    assert err.value.status == 0 and 1.0 <= elapsed < 5, f"{err.value} after {elapsed:.1f} s"
    assert client.list(PODS, cluster.namespace)["items"] == []  # on a fresh connection
