"""Server-sent events from what the client returns, in bounded memory.

`TrainingClient` is blocking (its log streams are plain iterators), the server is asynchronous.
A `Pump` runs one blocking iterator in a thread of its own and hands its items to the event loop
through a queue of at most QUEUE_ITEMS: when the browser reads slower than the job writes, the
thread waits (the server's memory does not grow, whatever the log's size). When the browser goes
away the pump is closed; its thread ends at the iterator's next item or end, and closes it.
`watch` sends a snapshot whenever it changes, read again every `interval` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

from trainop_core.errors import TrainopError

T = TypeVar("T")

QUEUE_ITEMS = 1000
BATCH_ITEMS = 500  # items per event
BATCH_SECONDS = 0.1  # an event waits this long for more items
HEARTBEAT_SECONDS = 15.0  # a comment on a quiet stream: a gone browser is noticed
# Pump threads at once. A pump whose page went away ends only at its iterator's next item or
# end (a blocking iterator cannot be interrupted), so pages reloaded over a quiet job leave some
# behind for a while: past this many, a new stream is refused, saying so, instead of piling up.
MAX_PUMPS = 64
_pumps = threading.BoundedSemaphore(MAX_PUMPS)
_END = object()


class TooManyStreams(TrainopError):
    """Every pump is taken (see MAX_PUMPS)."""


def event(name: str, data: Any) -> bytes:
    """One server-sent event; `data` as JSON on one line (JSON escapes every newline)."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


HEARTBEAT = b": still here\n\n"


class Pump(Generic[T]):
    """See the module's docstring. Made inside the event loop."""

    def __init__(self, items: Iterator[T], size: int = QUEUE_ITEMS) -> None:
        if not _pumps.acquire(blocking=False):
            raise TooManyStreams(
                f"{MAX_PUMPS} log streams are open (pages closed over a quiet job keep theirs "
                "until it writes or ends): close some pages, or wait"
            )
        self._items = items
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._room = threading.Semaphore(size)  # a slot per queued item: the bound
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainop-ui-pump", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._items:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:  # handed to the reader, who says what went wrong
            self._put(exc)
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            _pumps.release()

    def _put(self, item: Any) -> bool:
        """Queue `item`, waiting while the queue is full; False once the pump is closed."""
        while not self._room.acquire(timeout=0.5):
            if self._stop.is_set():
                return False
        if self._stop.is_set():
            return False
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: the server stopped
            return False
        return True

    async def _get(self, timeout: float) -> Any:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        self._room.release()
        return item

    async def batches(self) -> AsyncIterator[list[T]]:
        """Items in lists of at most BATCH_ITEMS, each sent at most BATCH_SECONDS after its
        first item arrived; an empty list after HEARTBEAT_SECONDS of quiet. Raises what the
        iterator raised, after the items before it."""
        while True:
            try:
                item = await self._get(HEARTBEAT_SECONDS)
            except asyncio.TimeoutError:
                yield []
                continue
            batch: list[T] = []
            deadline = self._loop.time() + BATCH_SECONDS
            while item is not _END and not isinstance(item, BaseException):
                batch.append(item)
                left = deadline - self._loop.time()
                if len(batch) >= BATCH_ITEMS or left <= 0:
                    item = None
                    break
                try:
                    item = await self._get(left)
                except asyncio.TimeoutError:
                    item = None
                    break
            if batch:
                yield batch
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                return

    def close(self) -> None:
        self._stop.set()


async def watch(
    snapshot: Callable[[], Awaitable[Any]], interval: float, name: str = "snapshot"
) -> AsyncIterator[bytes]:
    """An event each time `snapshot()` differs from the last one sent (a heartbeat comment in
    between; an event "failed" with the error's text when it raises a TrainopError); the stream
    ends after an event "gone" once `snapshot()` returns None."""
    sent: Any = object()
    quiet = 0.0
    while True:
        try:
            data = await snapshot()
        except TrainopError as err:  # the backend refused or failed: say so, and try again
            data = {"error": str(err)}
            if data != sent:
                yield event("failed", data)
                sent, quiet = data, 0.0
            await asyncio.sleep(interval)
            continue
        if data is None:
            yield event("gone", {})
            return
        if data != sent:
            yield event(name, data)
            sent, quiet = data, 0.0
        elif quiet >= HEARTBEAT_SECONDS:
            yield HEARTBEAT
            quiet = 0.0
        await asyncio.sleep(interval)
        quiet += interval
