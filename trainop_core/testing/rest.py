"""Raw JSON access to any API server for test infrastructure, over the operator's own connection.

The control plane and the kubelet stand-in use it so they need neither the ``kubernetes`` package
nor the operator's client (the code under test), yet share its one HTTP layer
(:class:`~trainop_core.operator.connection.Connection`): the same kept-alive connection per thread,
the same rule for what is sent again (a read after the server closed an idle connection; never a
write whose answer was lost), the same query naming, the same kubeconfig reader. What is its own is
the shape tests want: paths as strings, a watch as decoded events, errors as :class:`RestError`.
Inline ``*-data`` credentials stay in memory or in a private temporary directory removed at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.operator.connection import Connection, Stream, TransportError, target, tls_context
from trainop_core.operator.kube import ApiError

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class RestError(ApiError):
    """A non-2xx answer; `status` 0 means no answer at all (connection failure). An
    :class:`~trainop_core.operator.kube.ApiError`, with its `not_found`, `conflict`, ..."""


@dataclass
class Rest:
    """One API server and one identity. Thread-safe; `user_agent` names the caller.

    Built from a server URL and a token, CA file and client certificate files, or from a
    kubeconfig (:meth:`from_kubeconfig`: then `connection` carries what it says)."""

    url: str
    token: str = ""
    ca_file: str | None = None
    client_cert: tuple[str, str] | None = None  # (cert file, key file)
    insecure: bool = False
    user_agent: str = "trainop-testing"
    timeout: float = 30.0
    connection: Connection = field(default=None, repr=False)  # type: ignore[assignment]  # made below when not given

    def __post_init__(self) -> None:
        if self.connection is None:
            self.connection = self._connection()

    @classmethod
    def from_kubeconfig(cls, path: str | Path, user_agent: str = "trainop-testing") -> Rest:
        """The current context of a kubeconfig, read as the operator reads it (`kubeconfig.py`:
        tokens, certificates, exec plugins, impersonation, proxies)."""
        from trainop_core.operator.kubeconfig import kubeconfig_connection

        connection = kubeconfig_connection(Path(path), environ=os.environ)
        return cls(connection.server.rstrip("/"), user_agent=user_agent,
                   connection=connection.with_user_agent(user_agent))  # fmt: skip

    def with_user_agent(self, user_agent: str) -> Rest:
        """The same server and identity, naming another caller."""
        connection = self.connection.with_user_agent(user_agent)
        return dataclasses.replace(self, user_agent=user_agent, connection=connection)

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
            raise RestError.from_answer(status, raw)
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
        """One call; the status and the body as they came. Raises RestError(0) on no answer
        (`answer_lost` when the request went out: a write may have been applied)."""
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            status, _, raw = self.connection.request(
                method, target(path, query), data, headers, (self.timeout, self.timeout)
            )
        except TransportError as exc:
            raise RestError(0, "TransportError", str(exc), answer_lost=exc.sent) from exc
        return status, raw

    def stream(
        self, path: str, query: dict[str, Any], read_timeout: float
    ) -> tuple[Closer, Iterator[Obj]]:
        """A watch on its own connection: a closer (thread-safe, ends the stream) and the events."""
        url = target(path, {**query, "watch": "true"})
        try:
            stream = self.connection.stream(url, {"Accept": JSON}, (self.timeout, read_timeout))
        except TransportError as exc:
            raise RestError(0, "TransportError", str(exc)) from exc
        if stream.status >= 300:
            raise RestError.from_answer(stream.status, stream.read_all())
        closer = Closer(stream)
        return closer, _events(stream)

    def _connection(self) -> Connection:
        context = None
        if self.url.startswith("https"):
            cert, key = self.client_cert or (None, None)
            context = tls_context(
                ca_file=self.ca_file, cert_file=cert, key_file=key, insecure=self.insecure
            )
        authorization = f"Bearer {self.token}" if self.token else ""
        return Connection(self.url, context, lambda: authorization, user_agent=self.user_agent)


class Closer:
    """Ends a stream from any thread: shuts the socket down so a blocked read returns."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def __enter__(self) -> Closer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stream.close()


def _events(stream: Stream) -> Iterator[Obj]:
    """The watch's events (the server sends one a line) until it ends or is closed."""
    try:
        for line in stream.lines():
            event: Obj = json.loads(line)
            yield event
    except TransportError as exc:
        raise RestError(0, "TransportError", str(exc)) from exc
