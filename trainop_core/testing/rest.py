"""A small raw-JSON Kubernetes REST client on the standard library, for test infrastructure.

The control plane and the kubelet stand-in use it so they need neither the ``kubernetes`` package
nor the operator's own client (the code under test). It speaks to any API server: bearer token,
optional client certificate, a CA to trust. Connections are kept alive, one per thread.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.operator.connection import shut_down

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
IDLE_REUSE_SECONDS = 30.0  # a kept-alive connection idle longer is not reused


class RestError(Exception):
    """A non-2xx answer; `status` 0 means no answer at all (connection failure)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}".strip())


@dataclass
class Rest:
    """One API server and one identity. Thread-safe; `user_agent` names the caller."""

    url: str
    token: str = ""
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None  # (cert file, key file)
    insecure: bool = False
    user_agent: str = "trainop-testing"
    timeout: float = 30.0
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: str | Path, user_agent: str = "trainop-testing") -> Rest:
        """The current context of a kubeconfig (token and/or client certificate; no exec plugins).
        Inline ``*-data`` credentials are written to private temporary files."""
        import yaml

        config = yaml.safe_load(Path(path).read_text())
        context_name = config.get("current-context")
        context = _named(config.get("contexts"), context_name, "context")
        cluster = _named(config.get("clusters"), context["cluster"], "cluster")
        user = (
            _named(config.get("users"), context.get("user", ""), "user")
            if context.get("user")
            else {}
        )
        cert = _file_or_data(user, "client-certificate")
        key = _file_or_data(user, "client-key")
        return cls(
            url=str(cluster["server"]).rstrip("/"),
            token=str(user.get("token", "")),
            ca_file=_file_or_data(cluster, "certificate-authority"),
            client_cert=(cert, key) if cert and key else None,
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            user_agent=user_agent,
        )

    # --- verbs ---------------------------------------------------------------------------------
    def get(self, path: str, **query: Any) -> Obj:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Obj, **query: Any) -> Obj:
        return self.request("POST", path, body, query=query)

    def replace(self, path: str, body: Obj) -> Obj:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Obj) -> Obj:
        return self.request("PATCH", path, body, content_type=MERGE_PATCH)

    def delete(self, path: str, body: Obj | None = None, **query: Any) -> Obj:
        return self.request("DELETE", path, body, query=query)

    def request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        query: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> Obj:
        """One call; the decoded JSON answer. Raises RestError (status 0: transport failure)."""
        data = None if body is None else json.dumps(body).encode()
        status, raw = self.request_raw(method, path, data, query, content_type)
        if status >= 300:
            raise _error(status, raw)
        decoded: Obj = json.loads(raw) if raw else {}
        return decoded

    def request_raw(
        self,
        method: str,
        path: str,
        data: bytes | None = None,
        query: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> tuple[int, bytes]:
        """One call; the status and the body as they came. Raises RestError(0) on no answer."""
        while True:
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                conn.request(method, _target(path, query), data, self._headers(content_type))
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError) as exc:
                self._drop()
                # A kept-alive connection the server had closed while idle: once more, fresh.
                if not (reused and _retriable(exc)):
                    raise RestError(0, type(exc).__name__, str(exc)) from exc

    def stream(
        self, path: str, query: dict[str, Any], read_timeout: float
    ) -> tuple[Closer, Iterator[Obj]]:
        """A watch on its own connection: a closer (thread-safe, ends the stream) and the events."""
        conn = self._new_connection(read_timeout)
        try:
            conn.request(
                "GET", _target(path, {**query, "watch": "true"}), None, self._headers(JSON)
            )
            resp = conn.getresponse()
        except (http.client.HTTPException, OSError) as exc:
            conn.close()
            raise RestError(0, type(exc).__name__, str(exc)) from exc
        if resp.status >= 300:
            raw = resp.read()
            conn.close()
            raise _error(resp.status, raw)
        closer = Closer(conn)
        return closer, _events(resp, closer)

    # --- connections ---------------------------------------------------------------------------
    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.used > IDLE_REUSE_SECONDS:
            self._drop()  # the server has probably closed it (kube-apiserver: after 90 s)
            conn = None
        if conn is None:
            conn = self._local.conn = self._new_connection(self.timeout)
        self._local.used = time.monotonic()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port
        if parts.scheme == "http":
            return http.client.HTTPConnection(host, port, timeout=timeout)
        return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._ssl())

    def _ssl(self) -> ssl.SSLContext:
        context: ssl.SSLContext | None = getattr(self._local, "ssl", None)
        if context is None:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.client_cert:
                context.load_cert_chain(*self.client_cert)
            self._local.ssl = context
        return context


class Closer:
    """Ends a stream from any thread: shuts the socket down so a blocked read returns."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self._conn = conn
        self.closed = False

    def __enter__(self) -> Closer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True
        shut_down(self._conn)


def _events(resp: http.client.HTTPResponse, closer: Closer) -> Iterator[Obj]:
    try:
        for line in resp:  # http.client undoes the chunking; the server sends one event a line
            if line.strip():
                event: Obj = json.loads(line)
                yield event
    except Exception:
        if not closer.closed:
            raise  # closed by another thread: http.client may fail in any way, it is the end
    finally:
        closer.close()


def _target(path: str, query: dict[str, Any] | None) -> str:
    pairs = [(k, _query_value(v)) for k, v in (query or {}).items() if v not in (None, "")]
    return f"{path}?{urllib.parse.urlencode(pairs)}" if pairs else path


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _retriable(exc: BaseException) -> bool:
    # The server closed an idle kept-alive connection between two of our requests.
    closed = http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
    return isinstance(exc, closed | ssl.SSLEOFError | ssl.SSLZeroReturnError)


def _error(status: int, raw: bytes) -> RestError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return RestError(status, "", raw.decode(errors="replace")[:500])
    return RestError(status, str(body.get("reason", "")), str(body.get("message", "")))


def _named(items: Any, name: str, what: str) -> Obj:
    for item in items or []:
        if item.get("name") == name:
            found: Obj = item.get(what) or {}
            return found
    raise ValueError(f"kubeconfig has no {what} named {name!r}")


def _file_or_data(section: Obj, key: str) -> str | None:
    if section.get(key):
        return str(section[key])
    data = section.get(f"{key}-data")
    if not data:
        return None
    with tempfile.NamedTemporaryFile("wb", delete=False, prefix="trainop-kc-") as handle:
        handle.write(base64.b64decode(data))
    return handle.name
