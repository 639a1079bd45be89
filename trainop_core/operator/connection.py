"""The operator's HTTP connection to the API server, on the standard library.

Measured against upstream's Go operator (benchmarks/operator_vs_upstream.py), the official client
cost the operator most of its memory and a good part of its CPU: importing ``kubernetes.client``
loads ~1,300 generated modules (about 55 MiB of resident memory), and each request through
``ApiClient.call_api`` took about twice the CPU of a plain ``http.client`` request. The operator
only sends raw JSON, so it speaks HTTP itself: one kept-alive connection per thread, a watch on a
connection of its own that any thread can close.

:func:`load_connection` reads what the operator needs from ``--kubeconfig``, ``$KUBECONFIG``, the
in-cluster ServiceAccount, or ``~/.kube/config``: the server, its CA (``certificate-authority``
file or data, or ``insecure-skip-tls-verify``), and a token (``token`` or ``tokenFile``, re-read
every minute as client-go does, since bound tokens rotate) and/or a client certificate. A user or
cluster with any other key (an ``exec`` or ``auth-provider`` plugin, basic auth, impersonation, a
``proxy-url``, ...) and several files in ``$KUBECONFIG`` are loaded by the official client's loader
instead (imported only then), whose token hook is then asked for the credentials of every request.
:meth:`Connection.from_api_client` adopts a ready ``kubernetes.client.ApiClient`` (tests inject
one) the same way.

A request is sent again only when that cannot apply a write twice, as Go's ``net/http`` decides
for client-go: a kept-alive connection is checked before it is used (an idle connection the
server has closed reads as ready, and then a fresh one is opened, nothing having been sent), and
only GET, HEAD and OPTIONS are resent after a connection broke with the request sent and no
answer back. Any other failure after sending raises :class:`TransportError` with ``sent`` set:
the server may have acted, and only the caller can find out (a create looks the object up).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
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

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
IN_CLUSTER_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
TOKEN_REREAD_SECONDS = 60.0
IDLE_REUSE_SECONDS = 30.0  # a kept-alive connection idle longer is opened anew
USER_AGENT = "trainop-operator"
#: What this module reads of a kubeconfig; a user or cluster with any other key goes to the
#: official loader.
OWN_USER_KEYS = frozenset(
    {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key",
     "client-key-data", "extensions"}
)  # fmt: skip
OWN_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
     "tls-server-name", "extensions"}
)  # fmt: skip


#: Sent again after a connection broke with no answer: they change nothing on the server (Go's
#: net/http replays only these; PUT and DELETE are idempotent in theory, but a replayed guarded
#: PUT answers 409 and a replayed DELETE 404, a lie about what happened).
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})


class TransportError(Exception):
    """No answer at all (connect, TLS, read failed or timed out). `sent`: the request went out,
    so the server may have acted on it."""

    def __init__(self, message: str, sent: bool = False) -> None:
        super().__init__(message)
        self.sent = sent


class ConfigError(ValueError):
    """The kubeconfig or in-cluster configuration cannot be used; the message says why."""


class TokenFile:
    """A bearer token read from a file, and read again every minute (bound tokens rotate)."""

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


@dataclass
class Connection:
    """One API server and one identity; thread-safe. `authorization` gives the header value."""

    server: str
    context: ssl.SSLContext | None  # None for plain http
    authorization: Callable[[], str] = lambda: ""
    server_name: str | None = None  # the name to verify the certificate for (tls-server-name)
    user_agent: str = USER_AGENT
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
            context = _tls_context(
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
        while True:
            conn, reused = self._thread_connection(timeout)
            try:
                conn.request(method, self._base + path, body, self._headers(headers))
                resp = conn.getresponse()
            except (http.client.HTTPException, OSError) as exc:
                self._drop()
                # A kept-alive connection the server closed just as it was used, no answer:
                # a read once more, fresh; a write cannot be (the server may have applied it).
                if not (reused and method in REPLAYABLE and _closed(exc)):
                    raise TransportError(f"{type(exc).__name__}: {exc}", sent=True) from exc
                continue
            try:
                return resp.status, resp.headers, resp.read()
            except (http.client.HTTPException, OSError) as exc:  # the body broke off
                self._drop()
                raise TransportError(f"{type(exc).__name__}: {exc}", sent=True) from exc

    def stream(self, path: str, headers: dict[str, str], timeout: tuple[float, float]) -> Stream:
        """A streaming GET (a watch) on a connection of its own."""
        conn = self._new_connection(timeout)
        try:
            conn.request("GET", self._base + path, None, self._headers(headers))
            resp = conn.getresponse()
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return Stream(conn, resp)

    def _headers(self, headers: dict[str, str]) -> dict[str, str]:
        out = {"User-Agent": self.user_agent, **headers}
        authorization = self.authorization()
        if authorization:
            out["Authorization"] = authorization
        return out

    # --- connections -----------------------------------------------------------------------
    def _thread_connection(
        self, timeout: tuple[float, float]
    ) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it served a request before. One idle too long,
        or that the server has closed (seen before anything is sent on it), is opened anew."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and (
            time.monotonic() - self._local.used > IDLE_REUSE_SECONDS or _stale(conn)
        ):
            self._drop()
            conn = None
        reused = conn is not None
        if conn is None:
            conn = self._local.conn = self._new_connection(timeout)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout[1])
        self._local.used = time.monotonic()
        return conn, reused

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _new_connection(self, timeout: tuple[float, float]) -> http.client.HTTPConnection:
        connect, read = timeout
        conn: http.client.HTTPConnection
        if self.context is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=connect)
        else:
            conn = _TLSConnection(self._host, self._port, connect, self.context, self.server_name)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        assert conn.sock is not None
        keep_alive(conn.sock)  # a vanished peer is found even on an idle connection (liveness.py)
        conn.sock.settimeout(read)
        return conn


class _TLSConnection(http.client.HTTPSConnection):
    """HTTPS that verifies the certificate for `server_name` when one is given."""

    def __init__(
        self, host: str, port: int, timeout: float, context: ssl.SSLContext, server_name: str | None
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context, self._server_name = context, server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(
            self.sock, server_hostname=self._server_name or self.host
        )


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
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if not self.closed:  # closed by another thread: any failure is just the end
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
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


# --- configuration ----------------------------------------------------------------------------
def load_connection(kubeconfig: str = "") -> Connection:
    """`--kubeconfig`, else $KUBECONFIG, else in-cluster, else ~/.kube/config."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if path:
        if os.pathsep in path:  # several files to merge: the official loader knows how
            return _official(path)
        return kubeconfig_connection(Path(path).expanduser())
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(IN_CLUSTER_TOKEN):
        return in_cluster_connection()
    return kubeconfig_connection(Path("~/.kube/config").expanduser())


def in_cluster_connection(
    token_file: str = IN_CLUSTER_TOKEN, ca_file: str = IN_CLUSTER_CA
) -> Connection:
    """The pod's ServiceAccount: $KUBERNETES_SERVICE_HOST/PORT, its token and CA."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    server = f"https://{host}:{port or 443}"
    return Connection(server, _tls_context(ca_file=ca_file), TokenFile(token_file))


def kubeconfig_connection(path: Path) -> Connection:
    """The current context of the kubeconfig at `path`."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    context = _named(config.get("contexts"), config.get("current-context"), "context", path)
    cluster = _named(config.get("clusters"), context.get("cluster"), "cluster", path)
    user = (
        _named(config.get("users"), context.get("user"), "user", path)
        if context.get("user")
        else {}
    )
    if set(user) - OWN_USER_KEYS or set(cluster) - OWN_CLUSTER_KEYS:
        # exec and auth-provider plugins, basic auth, impersonation, proxies, anything newer:
        # the official loader, as before this module existed.
        return _official(str(path))
    base = path.parent
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"kubeconfig {path}: cluster has no server")
    context_tls = None
    if server.startswith("https"):
        context_tls = _tls_context(
            ca_file=_path(cluster.get("certificate-authority"), base),
            ca_data=_decoded(cluster.get("certificate-authority-data")),
            cert_data=_decoded(user.get("client-certificate-data")),
            key_data=_decoded(user.get("client-key-data")),
            cert_file=_path(user.get("client-certificate"), base),
            key_file=_path(user.get("client-key"), base),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
        )
    return Connection(server, context_tls, _token(user, base), cluster.get("tls-server-name"))


def _token(user: dict[str, Any], base: Path) -> Callable[[], str]:
    if user.get("token"):
        value = f"Bearer {user['token']}"
        return lambda: value
    if user.get("tokenFile"):
        return TokenFile(str(_path(user["tokenFile"], base)))
    return lambda: ""


def _official(path: str) -> Connection:
    """The official client's loader (all of kubeconfig), whose credentials we then use."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=cfg)
    return Connection.from_api_client(client.ApiClient(cfg))


def _named(items: Any, name: Any, what: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            found: dict[str, Any] = item.get(what) or {}
            return found
    raise ConfigError(f"kubeconfig {path} has no {what} named {name!r}")


def _path(value: Any, base: Path) -> str | None:
    if not value:
        return None
    candidate = Path(str(value)).expanduser()
    return str(candidate if candidate.is_absolute() else base / candidate)


def _decoded(data: Any) -> bytes | None:
    return base64.b64decode(data) if data else None


def _tls_context(
    *,
    ca_file: str | None = None,
    ca_data: bytes | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    cert_data: bytes | None = None,
    key_data: bytes | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
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
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
