"""A fault-injecting HTTPS proxy in front of a real kube-apiserver, for tests.

The client under test (the operator, a backend) talks TLS to the proxy on 127.0.0.1 with its own
bearer token; the proxy forwards every request to the API server unchanged, so identity, RBAC,
validation, conflicts and watch semantics stay the real server's. On the way it follows a
scripted list of :class:`Fault` rules (first match wins, each for ``count`` requests):

``status``  answer an error instead (429 with ``Retry-After``, 500, 409 ...), as a Status object;
``delay``   wait ``seconds`` before forwarding (added latency);
``cut``     forward a watch's first ``after_events`` events, then cut the stream mid-body;
``drop``    read the request and reset the connection without an answer;
``lose``    forward the request (the server acts on it), then reset the connection instead of
            relaying the answer: the client cannot know whether its write happened;
``hang``    read the request and then send nothing (a half-open connection) until the client
            gives up, ``seconds`` pass or the proxy stops.

It counts requests by ``(verb, resource)`` (``resource`` includes the subresource, e.g.
``pods/status``; verbs are the API server's: get, list, watch, create, update, patch, delete,
deletecollection) and answers by code, and can cut every open watch or partition its clients
from the server. Importing this module needs only the standard library::

    with ControlPlane() as cp, FaultProxy.for_control_plane(cp) as proxy:
        client = proxy.api_client(token)                    # kubernetes.client.ApiClient
        proxy.fail("create", "pods", code=429, retry_after=1)
        proxy.cut_watch("pods", after_events=2)
        proxy.stats.requests[("list", "pods")]
"""

from __future__ import annotations

import contextlib
import fnmatch
import http.client
import select
import socket
import ssl
import struct
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

ACTIONS = ("status", "delay", "cut", "drop", "lose", "hang")
HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade", "content-length", "host")
)  # fmt: skip
TRUE = ("1", "t", "T", "true", "TRUE", "True")
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}
STATUS_REASONS = {
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# --- what a request is --------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestInfo:
    """The API server's view of a request: verb, resource (with subresource), namespace, name."""

    verb: str
    resource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def is_watch(self) -> bool:
        return self.verb == "watch"


def request_info(method: str, target: str) -> RequestInfo:
    """Classify ``method target`` as kube-apiserver's RequestInfo does (non-resource paths such
    as ``/readyz`` get resource ``""``)."""
    url = urllib.parse.urlsplit(target)
    query = urllib.parse.parse_qs(url.query)
    parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        parts = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        parts = parts[3:]
    else:
        return RequestInfo(method.lower())
    watch = query.get("watch", [""])[-1] in TRUE  # Go's strconv.ParseBool
    if parts[:1] == ["watch"]:
        watch, parts = True, parts[1:]
    namespace = ""
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace, parts = parts[1], parts[2:]
    if not parts:
        return RequestInfo(method.lower())
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    name = parts[1] if len(parts) > 1 else ""
    if parts[0] == "namespaces" and name:
        namespace = name
    return RequestInfo(_verb(method, bool(name), watch), resource, namespace, name)


def _verb(method: str, named: bool, watch: bool) -> str:
    if method in ("GET", "HEAD"):
        return "watch" if watch else "get" if named else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return VERBS.get(method, method.lower())


# --- the rules ----------------------------------------------------------------------------------
@dataclass
class Fault:
    """One scripted rule; see the module docstring for the actions. ``verb`` and ``resource`` are
    fnmatch patterns ("*": any); ``count`` None applies it to every matching request. ``seconds``
    None makes ``hang`` last until the client or the proxy gives up."""

    action: str
    verb: str = "*"
    resource: str = "*"
    count: int | None = 1
    code: int = 500
    retry_after: int | None = None
    seconds: float | None = 0.0
    after_events: int = 0
    applied: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"Fault.action must be one of {', '.join(ACTIONS)}: {self.action!r}")

    def matches(self, info: RequestInfo) -> bool:
        return fnmatch.fnmatchcase(info.verb, self.verb) and fnmatch.fnmatchcase(
            info.resource, self.resource
        )

    @property
    def spent(self) -> bool:
        return self.count is not None and self.applied >= self.count


@dataclass
class Stats:
    """What went through the proxy. Read the counters directly; they only grow."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    namespaces: Counter[str] = field(default_factory=Counter)  # requests per namespace
    answers: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    faults: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    total_watches: int = 0
    open_watches: int = 0
    watch_events: int = 0

    def by_verb(self) -> Counter[str]:
        totals: Counter[str] = Counter()
        for (verb, _), n in self.requests.items():
            totals[verb] += n
        return totals

    def count(self, verb: str = "*", resource: str = "*") -> int:
        """Requests whose verb and resource match these fnmatch patterns."""
        return sum(
            n
            for (v, r), n in list(self.requests.items())
            if fnmatch.fnmatchcase(v, verb) and fnmatch.fnmatchcase(r, resource)
        )


# --- the proxy ----------------------------------------------------------------------------------
class FaultProxy:
    """An HTTPS proxy on 127.0.0.1 (a free port unless `port`) to the API server at `upstream`,
    whose serving certificate `ca_file` vouches for. Start/stop or use as a context manager."""

    def __init__(self, upstream: str, ca_file: str | Path | None = None, *, port: int = 0) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.upstream_context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        self.rules: list[Fault] = []
        self.stats = Stats()
        self.url = ""
        self._port = port
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[_Handler] = set()
        self._dir = Path()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def for_control_plane(cls, control_plane: Any) -> FaultProxy:
        """A proxy (not started) in front of a :class:`ControlPlane`."""
        return cls(control_plane.url, control_plane.ca_file)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        from ._kubelet_node import _self_signed

        self._dir = Path(tempfile.mkdtemp(prefix="trainop-proxy-"))
        cert, key = _self_signed()
        self.ca_file.write_bytes(cert)
        (self._dir / "tls.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, self._dir / "tls.key")
        handler = type("Handler", (_Handler,), {"proxy": self, "tls": context})
        self._server = _Server(("127.0.0.1", self._port), handler)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close every connection (open watches end), remove the certificate.
        Idempotent."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for conn in self._open_connections():
            conn.abort()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._dir != Path():
            for path in self._dir.iterdir():
                path.unlink()
            self._dir.rmdir()
            self._dir = Path()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def ca_file(self) -> Path:
        """The proxy's own self-signed serving certificate (trust it as the CA)."""
        return self._dir / "tls.crt"

    # --- clients -------------------------------------------------------------------------------
    def api_client(self, token: str, retries: Any = None) -> Any:
        """A ``kubernetes.client.ApiClient`` through the proxy as `token` (imports kubernetes).
        `retries` is urllib3's (default: it retries a request whose connection broke 3 times;
        False: never)."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"authorization": f"Bearer {token}"}
        config.retries = retries
        return client.ApiClient(config)

    def kubeconfig_for(
        self, token: str, path: str | Path, *, user: str = "user", namespace: str = ""
    ) -> Path:
        """Write a kubeconfig (mode 0600) that reaches the server through the proxy."""
        from .controlplane import write_kubeconfig

        return write_kubeconfig(
            Path(path), self.url, self.ca_file.read_bytes(), token, user=user, namespace=namespace
        )

    # --- scripting -----------------------------------------------------------------------------
    def add(self, fault: Fault, *, first: bool = False) -> Fault:
        """Append `fault` to the rules (or put it `first`); returns it (see ``applied``)."""
        with self._lock:
            self.rules.insert(0, fault) if first else self.rules.append(fault)
        return fault

    def fail(
        self,
        verb: str = "*",
        resource: str = "*",
        code: int = 500,
        count: int | None = 1,
        retry_after: int | None = None,
    ) -> Fault:
        """Answer the next `count` matching requests with `code` (429: Retry-After 1 s unless
        given)."""
        if code == 429 and retry_after is None:
            retry_after = 1
        return self.add(Fault("status", verb, resource, count, code=code, retry_after=retry_after))

    def delay(
        self, verb: str = "*", resource: str = "*", seconds: float = 1.0, count: int | None = 1
    ) -> Fault:
        return self.add(Fault("delay", verb, resource, count, seconds=seconds))

    def cut_watch(self, resource: str = "*", after_events: int = 0, count: int | None = 1) -> Fault:
        return self.add(Fault("cut", "watch", resource, count, after_events=after_events))

    def drop(self, verb: str = "*", resource: str = "*", count: int | None = 1) -> Fault:
        return self.add(Fault("drop", verb, resource, count))

    def lose(self, verb: str = "*", resource: str = "*", count: int | None = 1) -> Fault:
        return self.add(Fault("lose", verb, resource, count))

    def hang(
        self,
        verb: str = "*",
        resource: str = "*",
        count: int | None = 1,
        seconds: float | None = None,
    ) -> Fault:
        return self.add(Fault("hang", verb, resource, count, seconds=seconds))

    def clear(self) -> None:
        """Forget every rule (counters stay)."""
        with self._lock:
            self.rules.clear()

    def cut_open_watches(self, resource: str = "*") -> int:
        """End every open watch on `resource` mid-stream now; returns how many."""
        cut = [
            conn
            for conn in self._open_connections()
            if conn.streaming is not None
            and conn.streaming.is_watch
            and fnmatch.fnmatchcase(conn.streaming.resource, resource)
        ]
        for conn in cut:
            conn.abort()
        return len(cut)

    def partition(self) -> Fault:
        """Cut the clients off the server: every connection closed, every new request dropped,
        until :meth:`heal`."""
        fault = self.add(Fault("drop", count=None), first=True)
        for conn in self._open_connections():
            conn.abort()
        return fault

    def heal(self) -> None:
        with self._lock:
            self.rules[:] = [r for r in self.rules if not (r.action == "drop" and r.count is None)]

    def _take(self, info: RequestInfo) -> Fault | None:
        with self._lock:
            for fault in self.rules:
                if not fault.spent and fault.matches(info):
                    fault.applied += 1
                    self.stats.faults[(info.verb, info.resource, fault.action)] += 1
                    return fault
        return None

    def _open_connections(self) -> list[_Handler]:
        with self._lock:
            return list(self._connections)

    def _track(self, conn: _Handler, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)

    def _count(self, info: RequestInfo, code: int | None = None) -> None:
        with self._lock:
            if code is None:
                self.stats.requests[(info.verb, info.resource)] += 1
                self.stats.namespaces[info.namespace] += 1
            else:
                self.stats.answers[(info.verb, info.resource, code)] += 1

    def _count_watch(self, opened: bool) -> None:
        with self._lock:
            self.stats.total_watches += 1 if opened else 0
            self.stats.open_watches += 1 if opened else -1

    def _count_event(self) -> None:
        with self._lock:
            self.stats.watch_events += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away, a handshake a test cut short: not worth a traceback


class _Handler(BaseHTTPRequestHandler):
    """One client connection: requests forwarded, one after the other, on one upstream
    connection (re-opened when the server closed it)."""

    proxy: FaultProxy
    tls: ssl.SSLContext
    protocol_version = "HTTP/1.1"
    streaming: RequestInfo | None = None
    _upstream: http.client.HTTPSConnection | None = None
    _aborted = False

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
                self._relay_whole(resp)
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

    def _relay_whole(self, resp: http.client.HTTPResponse) -> None:
        data = resp.read()
        length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else len(data)
        self._send_head(resp, {"Content-Length": str(length)})
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
                if not piece or self._aborted:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                if info.is_watch and piece.strip():
                    events += 1
                    self.proxy._count_event()
            if self._aborted or cut_after is not None:
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
        import json

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
