"""A fault-injecting HTTPS proxy in front of a real kube-apiserver, for tests.

The client under test (the operator, a backend) talks TLS to the proxy on 127.0.0.1 with its own
bearer token; the proxy forwards every request to the API server unchanged, so identity, RBAC,
validation, conflicts and watch semantics stay the real server's. On the way it follows a
scripted list of :class:`Fault` rules (first match wins, each for ``count`` requests):

``status``  answer an error instead (429 with ``Retry-After``, 500, 409 ...), as a Status object;
``delay``   wait ``seconds`` before forwarding (added latency);
``cut``     forward a watch's first ``after_events`` events, then cut the stream mid-body; any
            other answer is cut after its headers and half its body (the server acted on it);
``drop``    read the request and reset the connection without an answer;
``lose``    forward the request (the server acts on it), then reset the connection instead of
            relaying the answer: the client cannot know whether its write happened;
``hang``    read the request and then send nothing (a half-open connection) until the client
            gives up, ``seconds`` pass or the proxy stops.

:meth:`FaultProxy.stall` turns connections already open into half-open ones: each stays open but
forwards no byte either way any more (not a watch's next event, not the end of its stream, not
the next request on a kept-alive connection), as when the peer vanished behind a NAT or a load
balancer hangs, until the client gives up or the proxy stops.

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

import fnmatch
import ssl
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import Any

from trainop_core.private_files import write_new

from ._faults import ACTIONS, Fault, RequestInfo, Stats, request_info
from ._proxyconn import Handler, Server

__all__ = ["ACTIONS", "Fault", "FaultProxy", "RequestInfo", "Stats", "request_info"]


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
        self._connections: set[Handler] = set()
        self._dir = Path()
        self._server: Server | None = None
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
        write_new(self.ca_file, cert)
        write_new(self._dir / "tls.key", key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, self._dir / "tls.key")
        handler = type("ProxyHandler", (Handler,), {"proxy": self, "tls": context})
        self._server = Server(("127.0.0.1", self._port), handler)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(0.05,),  # how often it checks for stop(): the default 0.5 s slows every test
            name="fault-proxy",
            daemon=True,
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

    def cut_answer(self, verb: str = "*", resource: str = "*", count: int | None = 1) -> Fault:
        """Cut the next `count` matching answers after their headers and half their body."""
        return self.add(Fault("cut", verb, resource, count))

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

    def stall(self, watch: str | None = None) -> int:
        """Make open connections half-open now: every one (idle kept-alive ones included), or
        with `watch` only those streaming a watch on a matching resource. Returns how many."""
        stalled = [
            conn
            for conn in self._open_connections()
            if watch is None
            or (
                conn.streaming is not None
                and conn.streaming.is_watch
                and fnmatch.fnmatchcase(conn.streaming.resource, watch)
            )
        ]
        for conn in stalled:
            conn.stalled = True
        return len(stalled)

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

    def _open_connections(self) -> list[Handler]:
        with self._lock:
            return list(self._connections)

    def _track(self, conn: Handler, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)

    def _count(self, info: RequestInfo, code: int | None = None) -> None:
        with self._lock:
            if code is None:
                self.stats.requests[(info.verb, info.resource)] += 1
                self.stats.namespaces[info.namespace] += 1
            else:
                self.stats.answers[(info.verb, info.resource, code)] += 1
                self.stats.answered.append((time.monotonic(), info, code))

    def _count_watch(self, opened: bool) -> None:
        with self._lock:
            self.stats.total_watches += 1 if opened else 0
            self.stats.open_watches += 1 if opened else -1

    def _count_event(self) -> None:
        with self._lock:
            self.stats.watch_events += 1
