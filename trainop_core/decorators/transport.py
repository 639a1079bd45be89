"""One bounded HTTP(S) call to a decorator server.

A fresh connection per call (a job asks once per replica type and generation: nothing to keep
alive), verified against the server's `caBundle`/`caFile` (else the system's CAs), within
`timeoutSeconds` from connecting to the last byte (a server that trickles its answer is cut off
at the deadline, not per read), and reading at most `maxResponseBytes`.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import time
import urllib.parse
from typing import Any, Protocol

from trainop_core.decorators.config import ServerSettings
from trainop_core.decorators.review import DecorationError

USER_AGENT = "trainop-decorator-client"
CHUNK = 64 * 1024


class Transport(Protocol):
    def post(self, server: ServerSettings, body: dict[str, Any]) -> bytes:
        """POST `body` as JSON to `server`; the answer's bytes (status 200 only). Does I/O,
        bounded by the server's timeout and size limit; raises DecorationError (unreachable,
        timeout, status, too_large)."""
        ...


class HttpTransport:
    """The real transport (thread-safe: nothing is shared between calls but TLS contexts)."""

    def __init__(self) -> None:
        self._contexts: dict[str, ssl.SSLContext] = {}

    def post(self, server: ServerSettings, body: dict[str, Any]) -> bytes:
        deadline = time.monotonic() + server.timeout_seconds
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            with self._open(server, deadline) as sock:
                conn = self._connection(server)
                conn.sock = _DeadlineSocket(sock, deadline)
                conn.request("POST", _target(server.url), data, _headers(len(data)))
                resp = conn.getresponse()
                raw = _read_bounded(resp, server.max_response_bytes)
        except TimeoutError:
            seconds = server.timeout_seconds
            raise DecorationError("timeout", f"no answer within {seconds:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise DecorationError("unreachable", f"{type(exc).__name__}: {exc}") from None
        if resp.status != 200:
            text = raw[:200].decode(errors="replace")
            raise DecorationError("status", f"HTTP {resp.status} {resp.reason}: {text}")
        return raw

    def _connection(self, server: ServerSettings) -> http.client.HTTPConnection:
        """Only the HTTP framing (request line, Host header, response parsing): the socket is
        opened by `_open`, so http.client never connects on its own."""
        parts = urllib.parse.urlsplit(server.url)
        if parts.scheme == "http":
            return http.client.HTTPConnection(parts.hostname or "", parts.port or 80)
        return http.client.HTTPSConnection(parts.hostname or "", parts.port or 443)

    def _open(self, server: ServerSettings, deadline: float) -> socket.socket:
        """A connected (and for https, handshaken) socket, each step given only what is left of
        the deadline: a connect or a TLS handshake is one blocking call, bounded as a whole."""
        parts = urllib.parse.urlsplit(server.url)
        host = parts.hostname or ""
        port = parts.port or (80 if parts.scheme == "http" else 443)
        sock = _connect(host, port, deadline)
        if parts.scheme == "http":
            return sock
        try:
            _until(sock, deadline)
            return self._context(server).wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise

    def _context(self, server: ServerSettings) -> ssl.SSLContext:
        context = self._contexts.get(server.name)
        if context is None:
            try:
                context = ssl.create_default_context(cadata=server.ca_pem())
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise DecorationError("unreachable", f"its CA cannot be loaded: {exc}") from None
            self._contexts[server.name] = context
        return context


class _DeadlineSocket:
    """What http.client needs of a socket (sendall, makefile, close), every read and write given
    only what is left of the call's time. A socket timeout alone is per read: a server sending
    its status line a byte at a time would never trip it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # in pieces, so a server that reads slowly cannot hold one send open
            _until(self._sock, self._deadline)
            sent = self._sock.send(view[:CHUNK])
            view = view[sent:]

    def makefile(self, mode: str = "rb", **_: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        """Nothing: http.client closes its connection while the response still reads; the call
        closes the real socket once it has the answer."""


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        _until(self._sock, self._deadline)
        return self._sock.recv_into(buffer)


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """Like socket.create_connection, but every address tried shares the one deadline (there,
    each address gets the whole timeout). Resolving the name is not bounded: see the docs."""
    error: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            _until(sock, deadline)
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _target(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.path or "/"


def _headers(length: int) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Content-Length": str(length),
        "User-Agent": USER_AGENT,
    }


def _until(sock: socket.socket, deadline: float) -> None:
    """Give the socket only what is left of the call's time (a blocking call on it is then
    bounded as a whole: CPython's recv, connect and TLS calls count down one deadline)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


def _read_bounded(resp: http.client.HTTPResponse, limit: int) -> bytes:
    declared = resp.getheader("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise DecorationError("too_large", f"the answer has {declared} bytes, over {limit}")
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = resp.read1(CHUNK)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise DecorationError("too_large", f"the answer is larger than {limit} bytes")
        chunks.append(chunk)
