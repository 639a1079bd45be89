"""JSON encoding of stored objects, cached per object.

Committed objects never change, so each ``(uid, resourceVersion)`` is encoded once and the
bytes are reused by every GET, LIST page and watcher (watch fan-out costs one encode per
event, not one per watcher). Only the object currently stored is cached; a store listener
drops entries when objects change or go away.
"""

from __future__ import annotations

import json
from typing import Any

from .events import Event, Obj
from .resources import ResourceType
from .store import Store


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Codec:
    """Encodes objects as served at a resource type's version."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cache: dict[str, tuple[str, bytes]] = {}
        store.subscribe(self._forget)

    def _forget(self, event: Event) -> None:
        if event.type != "ADDED":
            self._cache.pop(event.obj["metadata"].get("uid", ""), None)

    def encode(self, rt: ResourceType, obj: Obj) -> bytes:
        if obj.get("apiVersion") != rt.api_version:
            return dumps({**obj, "apiVersion": rt.api_version})
        meta = obj["metadata"]
        uid, rv = meta.get("uid", ""), meta.get("resourceVersion", "")
        hit = self._cache.get(uid)
        if hit is not None and hit[0] == rv:
            return hit[1]
        data = dumps(obj)
        with self._store.lock:
            current = self._store.by_uid(uid)
            if current is not None and current[1] is obj:
                self._cache[uid] = (rv, data)
        return data

    def list_body(self, rt: ResourceType, items: list[Obj], metadata: dict[str, Any]) -> bytes:
        head = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata}
        encoded = b",".join(self.encode(rt, obj) for obj in items)
        return dumps(head)[:-1] + b',"items":[' + encoded + b"]}"

    def event_line(self, rt: ResourceType, kind: str, obj: Obj) -> bytes:
        if kind == "BOOKMARK":  # only metadata; the type is the watched resource's
            obj = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        return b'{"type":"%s","object":%s}\n' % (kind.encode(), self.encode(rt, obj))
