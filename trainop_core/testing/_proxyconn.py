"""The fault proxy's connections: one thread per client connection, each request forwarded on
one upstream connection, or answered by the fault its rule says (see :mod:`.faultproxy`)."""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from ._faults import RequestInfo, request_info

if TYPE_CHECKING:
    from .faultproxy import FaultProxy

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade", "content-length", "host")
)  # fmt: skip
STATUS_REASONS = {
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away, a handshake a test cut short: not worth a traceback


class Handler(BaseHTTPRequestHandler):
    """One client connection: requests forwarded, one after the other, on one upstream
    connection (re-opened when the server closed it)."""

    proxy: FaultProxy
    tls: ssl.SSLContext
    protocol_version = "HTTP/1.1"
    streaming: RequestInfo | None = None
    _upstream: http.client.HTTPSConnection | None = None
    _aborted = False
    stalled = False  # set by FaultProxy.stall: no byte forwarded either way any more

    def setup(self) -> None:
        # Headers and body go out in two writes: without this, Nagle's algorithm and the client's
        # delayed ACK add 40 ms to every answer.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(30)  # a client that never finishes its handshake
        self.request = self.tls.wrap_socket(self.request, server_side=True)
        self.request.settimeout(None)
        self.proxy._track(self, True)  # only now: wrapping detached the plain socket
        if self.proxy._stopping.is_set():
            self.abort()
        super().setup()

    def finish(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().finish()
        self._close_upstream()
        self.proxy._track(self, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def abort(self) -> None:
        """Close both sides now (thread-safe): a blocked read or write in `handle` ends."""
        self._aborted = True
        self.close_connection = True
        for sock in (self.request, self._upstream.sock if self._upstream else None):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    # --- one request ---------------------------------------------------------------------------
    def do_GET(self) -> None:  # http.server naming: every method goes through _handle
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _handle(self) -> None:
        body = self._read_body()
        info = request_info(self.command, self.path)
        self.proxy._count(info)
        if self.stalled:  # a request on a stalled kept-alive connection: it goes nowhere
            self._hang(None)
            return
        fault = self.proxy._take(info)
        action = fault.action if fault else ""
        if fault is not None and action == "delay":
            self.proxy._stopping.wait(fault.seconds or 0.0)
        if fault is not None and action == "status":
            self._send_status(fault.code, fault.retry_after, info)
        elif action == "drop":
            self._reset()
        elif fault is not None and action == "hang":
            self._hang(fault.seconds)
        else:
            cut_after = fault.after_events if fault is not None and action == "cut" else None
            self._forward(info, body, cut_after, lose=action == "lose")

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return b"".join(_read_chunks(self.rfile))
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _forward(
        self, info: RequestInfo, body: bytes | None, cut_after: int | None, lose: bool = False
    ) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            resp = self._send_upstream(body, headers)
        except (OSError, http.client.HTTPException) as exc:
            if not self._aborted:
                self._send_status(502, None, info, f"upstream: {exc}")
            return
        self.proxy._count(info, resp.status)
        if lose:
            self._close_upstream()
            self._reset()
            return
        try:
            if _is_stream(resp):
                self._relay_stream(info, resp, cut_after)
            else:
                self._relay_whole(resp, cut=cut_after is not None)
        except (OSError, http.client.HTTPException, ValueError):
            self._abort_stream()

    def _send_upstream(self, body: bytes | None, headers: dict[str, str]) -> Any:
        for attempt in range(2):
            conn = self._connection()
            try:
                conn.request(self.command, self.path, body, headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ssl.SSLEOFError):  # fmt: skip
                self._close_upstream()  # the server closed the kept-alive connection: once more
                if attempt or self._aborted:
                    raise
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPSConnection:
        if self._upstream is None:
            up = self.proxy.upstream
            self._upstream = http.client.HTTPSConnection(
                up.hostname or "127.0.0.1", up.port, context=self.proxy.upstream_context
            )
        return self._upstream

    def _close_upstream(self) -> None:
        conn, self._upstream = self._upstream, None
        if conn is not None:
            conn.close()

    def _relay_whole(self, resp: http.client.HTTPResponse, cut: bool = False) -> None:
        """Forward an answer of known length; `cut`: only its headers and half its body."""
        data = resp.read()
        length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else len(data)
        self._send_head(resp, {"Content-Length": str(length)})
        if cut:
            self.wfile.write(data[: len(data) // 2])
            self._close_upstream()
            self._abort_stream()
            return
        self.wfile.write(data)
        if resp.will_close:
            self._close_upstream()

    def _relay_stream(
        self, info: RequestInfo, resp: http.client.HTTPResponse, cut_after: int | None
    ) -> None:
        """Forward a chunked body (a watch, a followed log) piece by piece as it arrives; a
        watch line by line, counting its events, and cut after `cut_after` of them."""
        self._send_head(resp, {"Transfer-Encoding": "chunked"})
        self.streaming, events = info, 0
        if info.is_watch:
            self.proxy._count_watch(True)
        try:
            while not (cut_after is not None and events >= cut_after):
                piece = resp.readline() if info.is_watch else resp.read1(65536)
                if self.stalled:  # not this piece, nor the end of the stream, nor anything more
                    self._hang(None)
                if not piece or self._aborted or self.stalled:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                if info.is_watch and piece.strip():
                    events += 1
                    self.proxy._count_event()
            if self._aborted or self.stalled or cut_after is not None:
                self._abort_stream()  # mid-body: no terminating chunk, the connection goes
            else:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            if info.is_watch:
                self.proxy._count_watch(False)
            self.streaming = None
            self._close_upstream()  # a streamed connection is never reused

    def _send_head(self, resp: http.client.HTTPResponse, extra: dict[str, str]) -> None:
        self.send_response_only(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()

    # --- faults --------------------------------------------------------------------------------
    def _send_status(
        self, code: int, retry_after: int | None, info: RequestInfo, message: str = ""
    ) -> None:
        reason = STATUS_REASONS.get(code, "InternalError")
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message
            or f"injected by the fault proxy: {code} on {info.verb} {info.resource or self.path}",
            "reason": reason,
            "code": code,
        }
        data = json.dumps(status).encode()
        self.proxy._count(info, code)
        self.send_response_only(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        """Close with a TCP reset and no answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.request.close()

    def _hang(self, seconds: float | None) -> None:
        """Answer nothing until the client closes, `seconds` pass or the proxy stops."""
        self.close_connection = True
        deadline = None if seconds is None else time.monotonic() + seconds
        while not (self.proxy._stopping.is_set() or self._aborted):
            if deadline is not None and time.monotonic() >= deadline:
                break
            with contextlib.suppress(OSError, ValueError):
                readable, _, _ = select.select([self.request], [], [], 0.2)
                if readable and not self.request.recv(1):
                    break  # the client gave up and closed
                continue
            break
        self._reset()

    def _abort_stream(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RDWR)


def _is_stream(resp: http.client.HTTPResponse) -> bool:
    return bool(resp.chunked) or (
        resp.getheader("Content-Length") is None and resp.status not in (204, 304)
    )


def _read_chunks(rfile: Any) -> Iterator[bytes]:
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline().strip():  # trailers
                pass
            return
        yield rfile.read(size)
        rfile.readline()
