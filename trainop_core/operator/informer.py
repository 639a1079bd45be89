"""A shared informer: one LIST+WATCH per resource type feeding a cache of raw dicts and handlers.

The loop (one daemon thread per informer): paginated LIST -> replace the cache (synthesising add,
update and delete notifications for what changed) -> WATCH from the list's resourceVersion with
bookmarks, tracking the newest resourceVersion itself (the official client ignores bookmark RVs) ->
on a server timeout or a dropped stream, WATCH again from that resourceVersion -> on 410 Gone,
LIST again. Errors back off exponentially (0.5 s doubling to 30 s); a watch the server ends
normally is no error and is resumed at once. The server-side watch timeout is jittered (client-go:
min * [1, 2)). The client gives a watch up once it has been silent for that timeout plus a margin
(`read_margin`): a healthy watch has ended by then, so a half-open connection is noticed within
`liveness.dead_watch_bound` (45 s by default; see `liveness.py` for why the watches are short).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from trainop_core.operator.kube import ApiError, KubeClient, Obj, Resource
from trainop_core.operator.liveness import CONNECT_TIMEOUT, WATCH_READ_MARGIN, WATCH_TIMEOUT

log = logging.getLogger(__name__)

IndexFunc = Callable[[Obj], list[str]]


class WatchStream(Protocol):
    """An open watch: iterate for events ({"type", "object"}); `close()` from any thread ends it."""

    def __iter__(self) -> Iterator[Obj]:
        """Events as they arrive; blocks on I/O; ends when the server ends the watch."""
        ...

    def close(self) -> None:
        """Abort the stream (idempotent, thread-safe); a blocked iteration then raises or ends."""
        ...


class ListWatch(Protocol):
    """The two calls an informer needs. Both do I/O and raise ApiError."""

    def list(self) -> tuple[list[Obj], str]:
        """Every object (all pages) and the list's resourceVersion."""
        ...

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        """Changes after `resource_version`, bookmarks included; the server ends it after
        `timeout_seconds` (the client gives a silent stream up only some time after that)."""
        ...


class EventHandler(Protocol):
    """Receives cache changes on the informer's thread. Must be quick (enqueue) and not raise."""

    def on_add(self, obj: Obj) -> None:
        """`obj` entered the cache (watch ADDED, or found by a (re-)list). No I/O."""
        ...

    def on_update(self, old: Obj, new: Obj) -> None:
        """`obj` changed (its resourceVersion differs). No I/O."""
        ...

    def on_delete(self, obj: Obj) -> None:
        """`obj` left the cache (watch DELETED, or missing from a re-list). No I/O."""
        ...


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace", "")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def resource_version(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


class _RestWatch:
    def __init__(
        self, client: KubeClient, path: str, query: dict[str, Any], read_timeout: float
    ) -> None:
        self._stream, self._lines = client.stream_lines(
            path, query, (CONNECT_TIMEOUT, read_timeout)
        )

    def __iter__(self) -> Iterator[Obj]:
        for line in self._lines:
            event: Obj = json.loads(line)
            yield event

    def close(self) -> None:
        self._stream.close()  # shuts the socket down: a read blocked in another thread returns


class RestListWatch:
    """ListWatch over the REST API: `resource` in `namespace` ("" = all), label-selected."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str = "",
        label_selector: str = "",
        page_size: int = 500,
        read_margin: float = WATCH_READ_MARGIN,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.page_size = page_size
        self.read_margin = read_margin

    def list(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token = ""
        while True:
            page = self.client.list(
                self.resource,
                self.namespace,
                labelSelector=self.label_selector,
                limit=self.page_size,
                **{"continue": token},
            )
            items += page.get("items") or []
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                return items, str(page.get("metadata", {}).get("resourceVersion", ""))

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        query = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": self.label_selector,
        }
        # The server may stay silent until it ends the watch: only silence past that is death.
        read_timeout = timeout_seconds + self.read_margin
        return _RestWatch(self.client, self.resource.path(self.namespace), query, read_timeout)


class Informer:
    """Cache + handlers for one resource type. `start()` runs the loop until `stop` is set."""

    def __init__(
        self,
        name: str,
        lw: ListWatch,
        min_watch_timeout: float = WATCH_TIMEOUT,
        backoff_cap: float = 30.0,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self.name = name
        self.lw = lw
        # What the cache keeps of each object (None: all of it but managedFields); handlers see
        # the transformed objects too.
        self.transform = transform
        self.min_watch_timeout = min_watch_timeout
        self.backoff_cap = backoff_cap
        self.lists = 0  # how many LISTs (tests and debugging)
        self.watches = 0  # how many WATCHes opened
        self._store: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._handlers: list[EventHandler] = []
        self._lock = threading.RLock()
        self._synced = threading.Event()
        self._stream: WatchStream | None = None
        self._rv = ""
        self._events = 0  # events delivered by the current watch

    # --- configuration (before start) --------------------------------------------------------
    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    def add_index(self, name: str, func: IndexFunc) -> None:
        self._indexers[name] = func
        self._indices[name] = {}

    # --- reads ---------------------------------------------------------------------------------
    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def list(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def by_index(self, name: str, value: str) -> builtins.list[Obj]:
        with self._lock:
            return [self._store[k] for k in sorted(self._indices[name].get(value, ()))]

    @property
    def last_resource_version(self) -> str:
        """Where the next watch resumes: the newest resourceVersion seen (bookmarks included)."""
        return self._rv

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # --- the loop ------------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stop,), name=f"informer-{self.name}", daemon=True
        )
        thread.start()
        return thread

    def interrupt(self) -> None:
        """Close the open watch (shutdown, or a test cutting the connection)."""
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # closing a broken stream may fail any way
                stream.close()

    def run(self, stop: threading.Event) -> None:
        need_list, failures = True, 0
        while not stop.is_set():
            self._events = 0
            try:
                if need_list:
                    self._relist()
                    need_list = False
                need_list = self._watch_once(stop)
                failures = 0
            except ApiError as exc:
                need_list = need_list or exc.gone
                failures = 0 if exc.gone else failures + 1
                self._log(stop, exc)
            except Exception as exc:  # any transport failure: back off, retry
                failures += 1
                self._log(stop, exc)
            if self._events:  # a stream that worked and then dropped: resume at once
                failures = 0
            if failures:
                stop.wait(min(self.backoff_cap, 0.5 * 2 ** (failures - 1)) * random.uniform(1, 1.2))

    def _log(self, stop: threading.Event, exc: Exception) -> None:
        if not stop.is_set():
            log.info("informer %s: %s: %s", self.name, type(exc).__name__, exc)

    def _relist(self) -> None:
        items, rv = self.lw.list()
        self.lists += 1
        self._replace(items)
        self._rv = rv
        self._synced.set()

    def _watch_once(self, stop: threading.Event) -> bool:
        """Watch until the stream ends; True when the cache must be re-listed (410 Gone)."""
        timeout = int(self.min_watch_timeout * random.uniform(1.0, 2.0))
        stream = self._stream = self.lw.watch(self._rv, max(1, timeout))
        self.watches += 1
        try:
            for event in stream:
                if stop.is_set():
                    return False
                self._events += 1
                if self._apply(event):
                    return True
        finally:
            self._stream = None
            stream.close()
        return False

    def _apply(self, event: Obj) -> bool:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code", 0))
            if code == 410:
                return True
            raise ApiError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
        rv = resource_version(obj)
        if kind in ("ADDED", "MODIFIED"):
            self._upsert(obj)
        elif kind == "DELETED":
            self._remove(object_key(obj), self._kept(obj))
        if rv:
            self._rv = rv  # BOOKMARK included: that is what bookmarks are for
        return False

    # --- cache mutation + notification -------------------------------------------------------
    def _replace(self, items: builtins.list[Obj]) -> None:
        fresh = {object_key(o): o for o in items}
        with self._lock:
            gone = [k for k in self._store if k not in fresh]
        for key in gone:
            self._remove(key, None)
        for obj in fresh.values():
            self._upsert(obj)

    def _kept(self, obj: Obj) -> Obj:
        if self.transform is not None:
            return self.transform(obj)
        obj.get("metadata", {}).pop("managedFields", None)  # never read; saves memory
        return obj

    def _upsert(self, obj: Obj) -> None:
        obj = self._kept(obj)
        key = object_key(obj)
        with self._lock:
            old = self._store.get(key)
            if old is not None and resource_version(old) == resource_version(obj):
                return
            self._store[key] = obj
            self._reindex(key, old, obj)
        for handler in self._handlers:
            if old is None:
                self._notify(handler.on_add, obj)
            else:
                self._notify(handler.on_update, old, obj)

    def _remove(self, key: str, obj: Obj | None) -> None:
        with self._lock:
            old = self._store.pop(key, None)
            if old is None:
                return
            self._reindex(key, old, None)
        for handler in self._handlers:
            self._notify(handler.on_delete, obj or old)

    def _reindex(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(old) if old is not None else []:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:  # as client-go: an empty set per owner gone would pile up
                        del index[value]
            for value in func(new) if new is not None else []:
                index.setdefault(value, set()).add(key)

    def _notify(self, func: Callable[..., None], *args: Obj) -> None:
        try:
            func(*args)
        except Exception:  # a handler bug must not kill the shared informer
            log.exception("informer %s: handler failed", self.name)
