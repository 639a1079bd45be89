"""A process node's kubelet endpoint: what kube-apiserver calls for ``kubectl logs`` and ``kubectl
exec``, over HTTPS, serving only a client whose certificate the node's client CA signed.

Served, as a kubelet serves them (the API server has already authorized the user):

- ``GET /containerLogs/{namespace}/{pod}/{container}`` with ``follow``, ``previous``,
  ``tailLines``, ``sinceSeconds``, ``sinceTime``, ``timestamps``, ``limitBytes`` and ``stream``
  (Stdout, Stderr, All), from the container's CRI log files (:mod:`.crilog`);
- ``GET``/``POST /exec/{namespace}/{pod}/{container}?command=...&input=1&output=1&error=1&tty=1``
  upgraded to SPDY/3.1 (:mod:`.spdy`), remote-command protocol v4 or v5 (:mod:`.remotecommand`);
- ``GET /healthz``.

Not served (a clear 501): attach, port-forward, run, and WebSockets to the kubelet (the node does
not declare ExtendWebSocketsToKubelet, so kube-apiserver translates kubectl's WebSocket to SPDY).

The node's kubelet supplies a :class:`ContainerRuntime`; the server knows nothing else of pods::

    context = pki.server_context(*pki.node_serving("node-1", ["127.0.0.1"]))
    server = serve_in_thread(runtime, context, host="127.0.0.1", port=10250)
    server.port ...; server.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainop_core.node import crilog, remotecommand, spdy
from trainop_core.node.http import (
    MAX_HEAD,
    Chunked,
    HttpError,
    Request,
    head,
    read_request,
    respond,
)
from trainop_core.node.remotecommand import ExecCommand, ExecOptions

log = logging.getLogger(__name__)

NOT_SERVED = {"attach", "portForward", "run", "containerLogsStream"}


class ContainerRuntime(Protocol):
    """What the server asks of the node's kubelet. Every method is called on the server's event
    loop thread: it must be quick (no network, no waiting on a process) and thread-safe with the
    kubelet's own threads. None means "no such container on this node" in every answer."""

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> Sequence[Path] | None:
        """The CRI log files (:class:`.crilog.CriLogWriter`'s format) of the container's current
        attempt, or with `previous` of the attempt before it, oldest file first (one file is
        fine). None if the pod or container is unknown here, or `previous` and there was no
        earlier attempt. A listed file may not exist yet (read as empty). No side effects."""
        ...

    def running(self, namespace: str, pod: str, container: str) -> bool:
        """Is the container's current attempt running? A follow (``kubectl logs -f``) ends once
        this is False, after reading the file once more: so it must turn False only after the
        attempt's log writer was closed. No side effects; called a few times a second."""
        ...

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        """How to run `command` (argv, never a shell line) inside the RUNNING container: its
        environment, working directory and network namespace (wrap the argv or give a
        `preexec`). None if there is no such running container. Starts nothing: the server
        starts the process (with pipes, or a terminal when `tty`), and kills it if the client
        leaves before it ends."""
        ...


@dataclass(frozen=True)
class ServerLimits:
    max_connections: int = 256
    idle_timeout: float = 90.0  # between requests on a kept-alive connection
    handshake_timeout: float = 10.0
    stream_idle_timeout: float = 4 * 3600.0  # an exec session with no frame at all (kubelet's)
    stream_creation_timeout: float = remotecommand.STREAM_CREATION_TIMEOUT


class KubeletServer:
    """The endpoint on one event loop (see the module docstring); ``start`` binds it."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        context: ssl.SSLContext,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: ServerLimits | None = None,
    ) -> None:
        self.runtime = runtime
        self.context = context
        self.host, self.port = host, port
        self.limits = limits or ServerLimits()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen; returns the port (useful when 0 asked for a free one)."""
        self._server = await asyncio.start_server(
            self._connection,
            self.host,
            self.port,
            ssl=self.context,
            ssl_handshake_timeout=self.limits.handshake_timeout,
            limit=MAX_HEAD,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and end every connection (an exec's command is killed)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.limits.max_connections:
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # close(): the task ends here, quietly
            pass
        except Exception as exc:  # a bug here: one line, never a traceback per request
            log.error("kubelet server: %s: %s", type(exc).__name__, exc)
        finally:
            self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await read_request(reader, self.limits.idle_timeout)
                if request is None or not await self._dispatch(request, reader, writer):
                    return
            except HttpError as err:
                await respond(writer, err.status, (err.message + "\n").encode(), close=True)
                return

    async def _dispatch(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must not be reused."""
        parts = request.path.strip("/").split("/")
        if parts == ["healthz"]:
            await respond(writer, 200, b"ok")
            return True
        if parts[0] in NOT_SERVED:
            raise HttpError(501, f"{parts[0]} is not served by a trainop process node")
        if parts[0] not in ("containerLogs", "exec") or len(parts) != 4 or not all(parts):
            raise HttpError(404, f"no such endpoint: {request.path[:200]}")
        if parts[0] == "containerLogs":
            if request.method != "GET":
                raise HttpError(405, "containerLogs: only GET")
            await self._logs(request, parts[1], parts[2], parts[3], reader, writer)
            return True
        if request.method not in ("GET", "POST"):
            raise HttpError(405, "exec: only GET or POST")
        options = ExecOptions.from_request(parts[1], parts[2], parts[3], request)
        await self._exec(request, options, reader, writer)
        return False

    # --- logs ----------------------------------------------------------------------------------
    async def _logs(
        self,
        request: Request,
        namespace: str,
        pod: str,
        container: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        options = log_options(request)
        previous = request.flag("previous")
        files = self.runtime.log_files(namespace, pod, container, previous)
        if files is None:
            what = "previous terminated container" if previous else "container"
            raise HttpError(
                400 if previous else 404, f'{what} "{container}" in pod "{pod}" not found'
            )
        body = Chunked(writer)
        await body.start()
        if options.follow and not previous:  # a previous attempt has ended: nothing to follow

            def running() -> bool:  # the container, and the client still there
                gone = reader.at_eof() or writer.is_closing()
                return not gone and self.runtime.running(namespace, pod, container)

            async for chunk in crilog.follow_chunks(list(files), options, running):
                await body.send(chunk)
        else:
            for chunk in crilog.read_chunks(list(files), options):
                await body.send(chunk)
        await body.end()

    # --- exec ----------------------------------------------------------------------------------
    async def _exec(
        self,
        request: Request,
        options: ExecOptions,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        protocol = _negotiate(request)
        command = self.runtime.exec_command(
            options.namespace, options.pod, options.container, options.command, options.tty
        )
        if command is None:
            what = f'container "{options.container}" in pod "{options.namespace}/{options.pod}"'
            raise HttpError(404, f"{what} is not running on this node")
        upgrade = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
        writer.write(head(101, {**upgrade, "X-Stream-Protocol-Version": protocol}))
        await writer.drain()
        session = spdy.Session(reader, writer, idle_timeout=self.limits.stream_idle_timeout)
        await _run_session(session, options, command, self.limits.stream_creation_timeout)


def _negotiate(request: Request) -> str:
    if "spdy/3.1" not in request.header("upgrade").lower():
        if "websocket" in request.header("upgrade").lower():
            raise HttpError(400, "exec: this node speaks SPDY/3.1 only, not WebSocket")
        raise HttpError(400, "exec: unable to upgrade: missing upgrade headers (SPDY/3.1)")
    if "upgrade" not in request.header("connection").lower():
        raise HttpError(400, "exec: unable to upgrade: Connection does not say Upgrade")
    offered = [p.strip() for p in request.header("x-stream-protocol-version").split(",")]
    for protocol in offered:
        if protocol in remotecommand.PROTOCOLS:
            return protocol
    accepted = ", ".join(remotecommand.PROTOCOLS)
    raise HttpError(
        403, f"exec: unable to negotiate a protocol: offered {offered}, served {accepted}"
    )


async def _run_session(
    session: spdy.Session, options: ExecOptions, command: ExecCommand, creation_timeout: float
) -> None:
    reading = asyncio.create_task(session.run())
    try:
        streams = await remotecommand.accept_streams(
            session, options.expected_streams(), creation_timeout
        )
        if streams is not None:
            running = asyncio.create_task(remotecommand.run_exec(streams, options, command))
            await asyncio.wait({reading, running}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():  # the client left first
                running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        # The client closes the connection once it read everything; closing first could reset it.
        await asyncio.wait({reading}, timeout=10.0)
    finally:
        await session.close()
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)


def log_options(request: Request) -> crilog.LogOptions:
    """The logs request's options; HttpError 400 naming the parameter that is unusable."""
    since_ns = None
    if request.param("sinceSeconds") and request.param("sinceTime"):
        raise HttpError(400, "sinceSeconds, sinceTime: at most one may be given")
    if request.param("sinceSeconds"):
        since_ns = time.time_ns() - _number(request, "sinceSeconds", 1) * 1_000_000_000
    elif request.param("sinceTime"):
        try:
            since_ns = crilog.parse_time(request.param("sinceTime"))
        except ValueError as exc:
            raise HttpError(400, f"sinceTime: {exc}") from None
    streams = {"": crilog.STREAMS, "All": crilog.STREAMS, "Stdout": ("stdout",)}
    streams["Stderr"] = ("stderr",)
    if request.param("stream") not in streams:
        raise HttpError(400, "stream: must be Stdout, Stderr or All")
    return crilog.LogOptions(
        tail_lines=_number(request, "tailLines", 0) if request.param("tailLines") else None,
        since_ns=since_ns,
        timestamps=request.flag("timestamps"),
        limit_bytes=_number(request, "limitBytes", 1) if request.param("limitBytes") else None,
        follow=request.flag("follow"),
        streams=frozenset(streams[request.param("stream")]),
    )


def _number(request: Request, name: str, minimum: int) -> int:
    text = request.param(name)
    if not text.isdigit() or len(text) > 18 or int(text) < minimum:
        raise HttpError(400, f"{name}: must be an integer of at least {minimum}, not {text[:40]!r}")
    return int(text)


class RunningServer:
    """A :class:`KubeletServer` on an event loop of its own, in a daemon thread."""

    def __init__(self, server: KubeletServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="kubelet-server", daemon=True
        )
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(server.start(), self.loop).result(30)

    def stop(self, timeout: float = 10.0) -> None:
        """End the server and its connections, then the loop. Idempotent."""
        if not self.loop.is_running():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        self.loop.close()


def serve_in_thread(
    runtime: ContainerRuntime,
    context: ssl.SSLContext,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ServerLimits | None = None,
) -> RunningServer:
    """Start the endpoint in a thread of its own (for a kubelet that is not asyncio); its port
    is ``.port``, ``.stop()`` ends it."""
    return RunningServer(KubeletServer(runtime, context, host, port, limits))
