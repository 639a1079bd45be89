"""Chunked streaming responses: watch event streams and ``pods/log?follow=true``.

A watch writes one JSON event per line. Events come from the watcher's own queue (filled
under the store lock); writing happens here, without the lock. A cut (fault injection) shuts
the socket down without the terminating chunk, as a dropped connection would.
"""

from __future__ import annotations

import contextlib
import json
import queue
import select
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import errors
from .events import CUT, STOP, Obj, Watcher
from .logs import tail
from .resources import ResourceType
from .routing import TRUE, Target
from .selectors import FieldSelector, LabelSelector
from .tables import as_table, wants_table

if TYPE_CHECKING:
    from .handler import ApiHandler

Encoder = Callable[[str, Obj], bytes]
DEFAULT_WATCH_TIMEOUT = 1800.0
POLL = 0.5
BATCH = 256


def _begin_chunked(handler: ApiHandler, content_type: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def _chunk(handler: ApiHandler, data: bytes) -> None:
    if data:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _end_chunked(handler: ApiHandler) -> None:
    handler.wfile.write(b"0\r\n\r\n")


def _cut(handler: ApiHandler) -> None:
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


def _client_gone(handler: ApiHandler) -> bool:
    try:
        readable, _, _ = select.select([handler.connection], [], [], 0)
        return bool(readable) and handler.connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _line(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def serve_watch(
    handler: ApiHandler,
    rt: ResourceType,
    target: Target,
    labels: LabelSelector,
    fields: FieldSelector,
    params: dict[str, str],
    cut_after: int | None,
) -> None:
    """Stream events until timeoutSeconds, server stop, a cut, or the client leaving."""
    ctx = handler.ctx
    watcher = Watcher(rt.key, target.namespace, labels, fields, rt.plural)
    timeout = float(params.get("timeoutSeconds") or 0) or DEFAULT_WATCH_TIMEOUT
    bookmarks = params.get("allowWatchBookmarks") in TRUE
    try:
        initial = params.get("sendInitialEvents") in TRUE
        if initial and not bookmarks:
            raise errors.invalid(
                "ListOptions",
                "",
                [("allowWatchBookmarks", "Forbidden: required with sendInitialEvents")],
            )
        ctx.store.start_watch(watcher, params.get("resourceVersion") or None, initial)
    except errors.ApiError as err:
        if err.code != 410:
            raise
        _begin_chunked(handler, "application/json")
        _chunk(handler, _line("ERROR", err.status()))
        _end_chunked(handler)
        return
    _begin_chunked(handler, "application/json")
    ctx.faults.watch_opened(watcher, target.label, handler.infrastructure)
    sent = 0
    try:
        encode = _encoder(handler, rt, wants_table(handler.headers.get("Accept", "")))
        sent = _pump(handler, watcher, encode, time.monotonic() + timeout, bookmarks, cut_after)
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True
    finally:
        ctx.store.unsubscribe(watcher.offer)
        ctx.faults.watch_closed(watcher, sent, handler.infrastructure)


def _encoder(handler: ApiHandler, rt: ResourceType, table: bool) -> Encoder:
    """Event lines; as ``meta.k8s.io`` Tables (one row each) when the client asked for them."""
    codec = handler.ctx.codec

    def encode(kind: str, obj: Obj) -> bytes:
        if table and kind != "BOOKMARK":
            return _line(kind, as_table(rt, [obj], obj["metadata"]["resourceVersion"]))
        return codec.event_line(rt, kind, obj)

    return encode


def _pump(
    handler: ApiHandler,
    watcher: Watcher,
    encode: Encoder,
    deadline: float,
    bookmarks: bool,
    cut_after: int | None,
) -> int:
    ctx, sent = handler.ctx, 0
    next_bookmark = time.monotonic() + ctx.bookmark_interval
    if cut_after == 0:
        _cut(handler)
        return 0
    while True:
        now = time.monotonic()
        if now >= deadline:
            _end_chunked(handler)
            return sent
        wait = min(deadline, next_bookmark if bookmarks else deadline, now + POLL) - now
        try:
            item = watcher.queue.get(timeout=max(wait, 0.0))
        except queue.Empty:
            if bookmarks and time.monotonic() >= next_bookmark:
                next_bookmark = time.monotonic() + ctx.bookmark_interval
                rv = ctx.store.idle_resource_version(watcher)
                if rv is not None:
                    _chunk(handler, encode("BOOKMARK", {"metadata": {"resourceVersion": rv}}))
            elif _client_gone(handler):
                handler.close_connection = True
                return sent
            continue
        batch, control = _drain(item, watcher)
        if cut_after is not None:
            batch = batch[: cut_after - sent]
            control = CUT if sent + len(batch) >= cut_after else control
        if batch:
            _chunk(handler, b"".join(encode(kind, obj) for kind, obj in batch))
            sent += len(batch)
        if control == CUT:
            _cut(handler)
            return sent
        if control == STOP:
            _end_chunked(handler)
            return sent


def _drain(first: Any, watcher: Watcher) -> tuple[list[tuple[str, Obj]], str | None]:
    batch: list[tuple[str, Obj]] = []
    item = first
    while True:
        if isinstance(item, str):
            return batch, item
        batch.append(item)
        if len(batch) >= BATCH:
            return batch, None
        try:
            item = watcher.queue.get_nowait()
        except queue.Empty:
            return batch, None


def _container(pod: Obj, requested: str | None) -> str:
    names = [str(c.get("name", "")) for c in pod.get("spec", {}).get("containers") or []]
    name = pod["metadata"]["name"]
    if requested:
        if requested not in names:
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    if len(names) != 1:
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: {names}"
        )
    return names[0]


def _check_started(pod: Obj, container: str) -> None:
    """400 for a container the kubelet reports as waiting, as the real kubelet answers."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if status.get("name") == container and waiting is not None:
            raise errors.bad_request(
                f'container "{container}" in pod "{pod["metadata"]["name"]}" is waiting to '
                f"start: {waiting.get('reason', 'ContainerCreating')}"
            )


def _terminated(pod: Obj | None, container: str) -> bool:
    if pod is None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return True
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == container and "terminated" in (status.get("state") or {}):
            return True
    return False


def serve_log(handler: ApiHandler, pod: Obj, params: dict[str, str]) -> None:
    """Plain-text log; with ``follow`` stream appended text until the container ends."""
    ctx = handler.ctx
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    container = _container(pod, params.get("container"))
    _check_started(pod, container)
    lines = int(params["tailLines"]) if params.get("tailLines") else None
    text = ctx.logs.read(ns, name, container)
    if params.get("follow") not in TRUE:
        data = tail(text, lines).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        return
    _begin_chunked(handler, "text/plain")
    _chunk(handler, tail(text, lines).encode())
    offset = len(text)
    rt = ctx.store.resource("pods")
    while not ctx.stopping.is_set():
        more = ctx.logs.wait_beyond(ns, name, container, offset, POLL / 5)
        if more:
            _chunk(handler, more.encode())
            offset += len(more)
            continue
        if _terminated(ctx.store.find(rt, ns, name), container) or _client_gone(handler):
            break
    _end_chunked(handler)
