"""One bounded HTTP(S) call to a decorator server.

A fresh connection per call (a job asks once per replica type and generation: nothing to keep
alive), verified against the server's `caBundle`/`caFile` (else the system's CAs), within
`timeoutSeconds` from connecting to the last byte (a server that trickles its answer is cut off
at the deadline, not per read), and reading at most `maxResponseBytes`.
"""

from __future__ import annotations

import http.client
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
        conn = self._connection(server)
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            conn.connect()
            sock = conn.sock  # the response reads it even after the connection lets go of it
            _until(sock, deadline)
            conn.request("POST", _target(server.url), data, _headers(len(data)))
            _until(sock, deadline)
            resp = conn.getresponse()
            raw = _read_bounded(resp, sock, deadline, server.max_response_bytes)
        except TimeoutError:
            seconds = server.timeout_seconds
            raise DecorationError("timeout", f"no answer within {seconds:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise DecorationError("unreachable", f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200:
            text = raw[:200].decode(errors="replace")
            raise DecorationError("status", f"HTTP {resp.status} {resp.reason}: {text}")
        return raw

    def _connection(self, server: ServerSettings) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(server.url)
        host, timeout = parts.hostname or "", server.timeout_seconds
        if parts.scheme == "http":
            return http.client.HTTPConnection(host, parts.port or 80, timeout=timeout)
        return http.client.HTTPSConnection(
            host, parts.port or 443, timeout=timeout, context=self._context(server)
        )

    def _context(self, server: ServerSettings) -> ssl.SSLContext:
        context = self._contexts.get(server.name)
        if context is None:
            try:
                context = ssl.create_default_context(cadata=server.ca_pem())
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise DecorationError("unreachable", f"its CA cannot be loaded: {exc}") from None
            self._contexts[server.name] = context
        return context


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


def _until(sock: socket.socket | None, deadline: float) -> None:
    """Give the socket only what is left of the call's time."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if sock is not None:
        sock.settimeout(left)


def _read_bounded(
    resp: http.client.HTTPResponse, sock: socket.socket | None, deadline: float, limit: int
) -> bytes:
    declared = resp.getheader("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise DecorationError("too_large", f"the answer has {declared} bytes, over {limit}")
    chunks: list[bytes] = []
    total = 0
    while True:
        _until(sock, deadline)
        chunk = resp.read1(CHUNK)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise DecorationError("too_large", f"the answer is larger than {limit} bytes")
        chunks.append(chunk)
