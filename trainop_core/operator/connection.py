"""The operator's HTTP connection to the API server, on the standard library.

Measured against upstream's Go operator (benchmarks/operator_vs_upstream.py), the official client
cost the operator most of its memory and a good part of its CPU: importing ``kubernetes.client``
loads ~1,300 generated modules (about 55 MiB of resident memory), and each request through
``ApiClient.call_api`` took about twice the CPU of a plain ``http.client`` request. The operator
only sends raw JSON, so it speaks HTTP itself: one kept-alive connection per thread, a watch on a
connection of its own that any thread can close. The project's test tooling
(``trainop_core.testing.rest``) sends its requests through this class too: one HTTP layer.

Where the server, the credentials and the proxy come from (a kubeconfig, in-cluster, the proxy
environment variables) is `kubeconfig.py`; exec credential plugins are `execcred.py`. A
:class:`Connection` takes them as they are: a static TLS context or one asked for every new
connection (an exec plugin's client certificate rotates), an Authorization value asked for every
request, extra headers (impersonation), a proxy reached through CONNECT (an https:// one through
TLS: `proxytls.py`), and a hook that a
401 answer calls so that credentials that can be renewed are, and the request is sent once more
(the server did not act on it). :meth:`Connection.from_api_client` adopts a ready
``kubernetes.client.ApiClient`` (tests inject one).

A request is sent again only when that cannot apply a write twice, as Go's ``net/http`` decides
for client-go: a kept-alive connection is checked before it is used (an idle connection the
server has closed reads as ready, and then a fresh one is opened, nothing having been sent), and
only GET, HEAD and OPTIONS are resent after a connection broke with the request sent and no
answer back. Any other failure after sending raises :class:`TransportError` with ``sent`` set:
the server may have acted, and only the caller can find out (a create looks the object up).
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.operator.liveness import keep_alive
from trainop_core.private_files import write_new

TOKEN_REREAD_SECONDS = 60.0
IDLE_REUSE_SECONDS = 30.0  # a kept-alive connection idle longer is opened anew
USER_AGENT = "trainop-operator"

#: Sent again after a connection broke with no answer: they change nothing on the server (Go's
#: net/http replays only these; PUT and DELETE are idempotent in theory, but a replayed guarded
#: PUT answers 409 and a replayed DELETE 404, a lie about what happened).
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
#: Methods http.client gives "Content-Length: 0" when they carry no body.
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})

Headers = tuple[tuple[str, str], ...]  # (name, value) pairs; a name may repeat
#: Asked after a 401 with the Authorization value and TLS context that were refused: True when
#: the credentials are (or have just been) renewed, so the request is worth sending once more.
Refresh = Callable[[str, "ssl.SSLContext | None"], bool]


class TransportError(Exception):
    """No answer at all (connect, TLS, read failed or timed out). `sent`: the request went out,
    so the server may have acted on it."""

    def __init__(self, message: str, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class ConfigError(ValueError):
    """The kubeconfig or in-cluster configuration cannot be used; the message says why."""


class TokenFile:
    """A bearer token read from a file, and read again every minute (bound tokens rotate), as
    client-go's cached file token source does; at once after a 401 (`refresh`)."""

    def __init__(self, path: str, reread_seconds: float = TOKEN_REREAD_SECONDS) -> None:
        self.path = path
        self.reread_seconds = reread_seconds
        self._value, self._read_at = "", 0.0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if time.monotonic() - self._read_at >= self.reread_seconds or not self._value:
                self._value = Path(self.path).read_text().strip()
                self._read_at = time.monotonic()
            return f"Bearer {self._value}" if self._value else ""

    def refresh(self, authorization: str, context: ssl.SSLContext | None) -> bool:
        """A 401: read the file again; worth a second try only if the token changed."""
        with self._lock:
            self._read_at = 0.0
        return self() != authorization


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy that tunnels to the server with CONNECT (as Go's transport does for HTTPS)."""

    host: str
    port: int
    authorization: str = ""  # Proxy-Authorization, from the proxy URL's user:password
    source: str = "proxy-url"  # where it was configured, for messages
    tls: bool = False  # an https:// proxy: TLS to the proxy too (`proxytls.py`)

    def tunnel_headers(self) -> dict[str, str]:
        return {"Proxy-Authorization": self.authorization} if self.authorization else {}


@dataclass
class Connection:
    """One API server and one identity; thread-safe. `authorization` gives the header value."""

    server: str
    context: ssl.SSLContext | None  # None for plain http
    authorization: Callable[[], str] = lambda: ""
    server_name: str | None = None  # the name to verify the certificate for (tls-server-name)
    user_agent: str = USER_AGENT
    headers: Headers = ()  # sent with every request (impersonation)
    proxy: Proxy | None = None
    #: Asked for the TLS context of every new connection (an exec plugin's client certificate
    #: rotates); when it gives another one, kept-alive connections are closed and opened anew.
    context_source: Callable[[], ssl.SSLContext] | None = None
    refresh: Refresh | None = None  # after a 401: see `Refresh`
    _local: threading.local = field(default_factory=threading.local, repr=False)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.server)
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base = parts.path.rstrip("/")

    # --- construction ----------------------------------------------------------------------
    @classmethod
    def from_api_client(cls, api: Any) -> Connection:
        """Adopt a ``kubernetes.client.ApiClient``'s server, TLS settings and credentials (its
        token hook is asked on every request, so exec plugins keep refreshing)."""
        cfg = api.configuration
        if getattr(cfg, "proxy", None):
            raise ConfigError("proxies are not supported by the operator's connection")
        context = None
        if str(cfg.host).startswith("https"):
            context = tls_context(
                ca_file=cfg.ssl_ca_cert,
                cert_file=cfg.cert_file,
                key_file=cfg.key_file,
                insecure=not cfg.verify_ssl,
            )

        def authorization() -> str:
            # The client's own auth settings: from kubernetes 37 the token is kept under
            # "BearerToken" (before: "authorization"); this asks the refresh hook either way.
            setting = cfg.auth_settings().get("BearerToken") or {}
            return str(setting.get("value") or "")

        return cls(str(cfg.host), context, authorization, getattr(cfg, "tls_server_name", None))

    def with_user_agent(self, user_agent: str) -> Connection:
        """The same server, identity and proxy, naming another caller."""
        return Connection(
            self.server, self.context, self.authorization, self.server_name, user_agent,
            self.headers, self.proxy, self.context_source, self.refresh,
        )  # fmt: skip

    # --- requests --------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        timeout: tuple[float, float],
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request on this thread's kept-alive connection: (status, headers, body).

        Raises TransportError, with `sent` when the server may have acted on the request."""
        refreshed = False
        while True:
            conn, reused = self._thread_connection(timeout)
            authorization = self.authorization()
            try:
                _send(conn, method, self._base + path, body, self._headers(headers, authorization))
                resp = conn.getresponse()
            except (http.client.HTTPException, OSError) as exc:
                self._drop()
                # A kept-alive connection the server closed just as it was used, no answer:
                # a read once more, fresh; a write cannot be (the server may have applied it).
                if not (reused and method in REPLAYABLE and _closed(exc)):
                    raise TransportError(f"{type(exc).__name__}: {exc}", sent=True) from exc
                continue
            try:
                answer = resp.status, resp.headers, resp.read()
            except (http.client.HTTPException, OSError) as exc:  # the body broke off
                self._drop()
                raise TransportError(f"{type(exc).__name__}: {exc}", sent=True) from exc
            # A 401: the server did not act; credentials that can be renewed are, then once more.
            if answer[0] != 401 or refreshed or not self._renewed(authorization, conn):
                return answer
            refreshed = True

    def stream(self, path: str, headers: dict[str, str], timeout: tuple[float, float]) -> Stream:
        """A streaming GET (a watch) on a connection of its own."""
        for attempt in range(2):
            conn = self._new_connection(timeout, self._current_context())
            authorization = self.authorization()
            try:
                _send(conn, "GET", self._base + path, None, self._headers(headers, authorization))
                resp = conn.getresponse()
            except (http.client.HTTPException, OSError) as exc:
                conn.close()
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            stream = Stream(conn, resp)
            if resp.status != 401 or attempt or not self._renewed(authorization, conn):
                return stream
            stream.read_all()
        raise AssertionError("unreachable")

    def _renewed(self, authorization: str, conn: http.client.HTTPConnection) -> bool:
        if self.refresh is None:
            return False
        return self.refresh(authorization, getattr(conn, "tls", None))

    def _headers(self, headers: dict[str, str], authorization: str) -> list[tuple[str, str]]:
        out = [("User-Agent", self.user_agent), *headers.items(), *self.headers]
        if authorization:
            out.append(("Authorization", authorization))
        return out

    # --- connections -----------------------------------------------------------------------
    def _current_context(self) -> ssl.SSLContext | None:
        return self.context_source() if self.context_source is not None else self.context

    def _thread_connection(
        self, timeout: tuple[float, float]
    ) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it served a request before. One idle too long,
        that the server has closed (seen before anything is sent on it), or made with TLS
        credentials since replaced, is opened anew."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        context = self._current_context()
        if conn is not None and (
            time.monotonic() - self._local.used > IDLE_REUSE_SECONDS
            or self._local.context is not context
            or _stale(conn)
        ):
            self._drop()
            conn = None
        reused = conn is not None
        if conn is None:
            conn = self._local.conn = self._new_connection(timeout, context)
            self._local.context = context
        elif conn.sock is not None:
            conn.sock.settimeout(timeout[1])
        self._local.used = time.monotonic()
        return conn, reused

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _new_connection(
        self, timeout: tuple[float, float], context: ssl.SSLContext | None
    ) -> http.client.HTTPConnection:
        connect, read = timeout
        host, port = (self.proxy.host, self.proxy.port) if self.proxy else (self._host, self._port)
        conn: http.client.HTTPConnection
        if self.proxy is not None and self.proxy.tls:
            from trainop_core.operator.proxytls import ProxiedConnection

            proxy_context = context or ssl.create_default_context()
            server_name = self.server_name or self._host
            conn = ProxiedConnection((host, port), connect, proxy_context, context, server_name)
        elif context is None:
            conn = http.client.HTTPConnection(host, port, timeout=connect)
        else:
            conn = _TLSConnection(host, port, connect, context, self.server_name or self._host)
        if self.proxy is not None:
            conn.set_tunnel(self._host, self._port, self.proxy.tunnel_headers())
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            via = f" (through the proxy of {self.proxy.source})" if self.proxy else ""
            raise TransportError(f"{type(exc).__name__}: {exc}{via}") from exc
        assert conn.sock is not None
        keep_alive(conn.sock)  # a vanished peer is found even on an idle connection (liveness.py)
        conn.sock.settimeout(read)
        return conn


class _TLSConnection(http.client.HTTPSConnection):
    """HTTPS that verifies the certificate for `server_name` (the server's host name, or the
    kubeconfig's tls-server-name), also at the end of a proxy's tunnel."""

    def __init__(
        self, host: str, port: int, timeout: float, context: ssl.SSLContext, server_name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.tls, self._server_name = context, server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # and the CONNECT tunnel, if set
        self.sock = self.tls.wrap_socket(self.sock, server_hostname=self._server_name)


def target(path: str, query: dict[str, Any] | None) -> str:
    """`path` with `query` encoded (None and "" left out, booleans as true/false)."""
    pairs = [(k, _query_value(v)) for k, v in (query or {}).items() if v not in (None, "")]
    return f"{path}?{urllib.parse.urlencode(pairs)}" if pairs else path


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _send(
    conn: http.client.HTTPConnection,
    method: str,
    url: str,
    body: bytes | None,
    headers: list[tuple[str, str]],
) -> None:
    """`conn.request` with headers that may repeat (Impersonate-Group: one header a group)."""
    conn.putrequest(method, url, skip_accept_encoding=True)
    for name, value in headers:
        conn.putheader(name, value)
    if body is not None or method in _WITH_BODY:
        conn.putheader("Content-Length", str(len(body or b"")))
    conn.endheaders(body)


class Stream:
    """An open streaming response: iterate `lines()`; `close()` from any thread ends it."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn, self.resp = conn, resp
        self.status = resp.status
        self.closed = False

    def read_all(self) -> bytes:
        try:
            return self.resp.read()
        finally:
            self.close()

    def lines(self) -> Iterator[bytes]:
        """Non-empty lines as they arrive (http.client undoes the chunking); ends at the end
        of the response or once closed."""
        try:
            for line in self.resp:
                if line.strip():
                    yield line
        except Exception as exc:
            if self.closed:  # closed by another thread: http.client may fail in any way (even
                return  # an AttributeError on the file it just closed): it is just the end
            if isinstance(exc, http.client.HTTPException | OSError | ValueError):
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Shut the socket down, so a read blocked in another thread returns (idempotent)."""
        self.closed = True
        shut_down(self.conn)


def shut_down(conn: http.client.HTTPConnection) -> None:
    """Close `conn` from any thread: its socket is shut down first, so that a read blocked on it
    in another thread returns instead of waiting for the server (close alone does not wake it)."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def tls_context(
    *,
    ca_file: str | None = None,
    ca_data: bytes | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    cert_data: bytes | None = None,
    key_data: bytes | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
    """A client TLS context: the CA to trust (else the system's), an optional client
    certificate (files or PEM data; data never outlives this call on disk)."""
    context = ssl.create_default_context(
        cafile=ca_file, cadata=ca_data.decode() if ca_data else None
    )
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_data or key_data:
        with tempfile.TemporaryDirectory() as tmp:  # the ssl module loads keys from files only
            cert_file = str(write_new(Path(tmp, "tls.crt"), cert_data or b""))
            key_file = str(write_new(Path(tmp, "tls.key"), key_data or b""))
            context.load_cert_chain(cert_file, key_file)
    elif cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def _closed(exc: BaseException) -> bool:
    """The server closed the connection (rather than timing out or refusing the TLS)."""
    closed = http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
    return isinstance(exc, closed | ssl.SSLEOFError | ssl.SSLZeroReturnError)


def _stale(conn: http.client.HTTPConnection) -> bool:
    """Has the server closed this idle kept-alive connection? An HTTP/1.1 server sends nothing on
    an idle connection unless it is closing it (end of stream, a reset, at most a 408 first), so
    a connection with anything to read is stale. Go's transport notices the same from a read it
    keeps posted on every idle connection."""
    sock = conn.sock
    if sock is None:
        return True
    if hasattr(sock, "pending") and sock.pending():  # an SSLSocket, or TLS in a proxy's TLS
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
