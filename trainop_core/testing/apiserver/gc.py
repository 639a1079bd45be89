"""Garbage collector and namespace controller, as kube-controller-manager runs them.

A background thread consumes store events and, through ordinary store writes (so every step
is visible to watches):
- deletes dependents whose owners are all gone (background propagation) and strips
  ownerReferences to vanished owners when other owners remain;
- for an owner with the ``foregroundDeletion`` finalizer, deletes its dependents (foreground)
  and drops the finalizer once no dependent with ``blockOwnerDeletion: true`` is left;
- for an owner with the ``orphan`` finalizer, removes its ownerReferences from dependents,
  then drops the finalizer;
- empties a terminating namespace, then finalizes it.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable

from . import errors
from .events import Event, Obj
from .resources import ResourceType
from .store import Store

log = logging.getLogger(__name__)
FOREGROUND, ORPHAN = "foregroundDeletion", "orphan"


def _refs(obj: Obj) -> list[dict[str, object]]:
    return list(obj["metadata"].get("ownerReferences") or [])


def _deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


class GarbageCollector:
    """Runs on its own thread between :meth:`start` and :meth:`stop`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._events: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()

    def start(self) -> None:
        self._store.subscribe(self._events.put)
        self._thread = threading.Thread(target=self._run, name="fake-apiserver-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._store.unsubscribe(self._events.put)
        self._events.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while (event := self._events.get()) is not None:
            try:
                self._handle(event)
            except Exception:  # a GC bug must not stop the collector thread
                log.exception("garbage collector failed on %s", event.type)

    def _handle(self, event: Event) -> None:
        obj, meta = event.obj, event.obj["metadata"]
        rt = self._store.registry.storage_type(*event.rkey)
        if event.type == "DELETED":
            for dep_rt, dep in self._store.dependents(meta["uid"]):
                self._collect(dep_rt, dep)
        elif rt is not None and _deleting(obj):
            finalizers = meta.get("finalizers") or []
            if FOREGROUND in finalizers:
                self._delete_dependents(meta["uid"])
            if ORPHAN in finalizers:
                self._orphan(rt, obj)
            if rt.plural == "namespaces" and not rt.group:
                self._empty_namespace(meta["name"])
        elif rt is not None and event.type == "ADDED" and _refs(obj):
            self._collect(rt, obj)
        for ref in _refs(obj):
            self._maybe_release_foreground(str(ref.get("uid")))
        if event.type == "DELETED" and meta.get("namespace"):
            self._maybe_finish_namespace(meta["namespace"])

    def _owner_exists(self, uid: str, dependent: Obj) -> bool:
        found = self._store.by_uid(uid)
        if found is None:
            return False
        owner_rt, owner = found
        return not owner_rt.namespaced or owner["metadata"].get("namespace") == dependent[
            "metadata"
        ].get("namespace")

    def _collect(self, rt: ResourceType, dependent: Obj) -> None:
        refs = _refs(dependent)
        alive = [r for r in refs if self._owner_exists(str(r.get("uid")), dependent)]
        if not alive:
            self._delete(rt, dependent, "Background")
        elif len(alive) < len(refs):
            keep = {str(r.get("uid")) for r in alive}
            self._edit(rt, dependent, lambda o: _set_refs(o, keep))

    def _delete_dependents(self, uid: str) -> None:
        for rt, dep in self._store.dependents(uid):
            if not _deleting(dep):
                self._delete(rt, dep, "Foreground")
        self._maybe_release_foreground(uid)

    def _maybe_release_foreground(self, uid: str) -> None:
        found = self._store.by_uid(uid)
        if found is None:
            return
        rt, owner = found
        if not _deleting(owner) or FOREGROUND not in (owner["metadata"].get("finalizers") or []):
            return
        for _, dep in self._store.dependents(uid):
            if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in _refs(dep)):
                return
        self._edit(rt, owner, lambda o: _drop_finalizer(o, FOREGROUND))

    def _orphan(self, rt: ResourceType, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        for dep_rt, dep in self._store.dependents(uid):
            keep = {str(r.get("uid")) for r in _refs(dep) if r.get("uid") != uid}
            self._edit(dep_rt, dep, functools.partial(_set_refs, keep=keep))
        self._edit(rt, owner, lambda o: _drop_finalizer(o, ORPHAN))

    def _empty_namespace(self, namespace: str) -> None:
        for rt, obj in self._store.namespace_contents(namespace):
            if not _deleting(obj):
                self._delete(rt, obj, "Background")
        self._maybe_finish_namespace(namespace)

    def _maybe_finish_namespace(self, namespace: str) -> None:
        ns = self._store.find(self._store.resource("namespaces"), "", namespace)
        if ns is None or not _deleting(ns) or self._store.namespace_contents(namespace):
            return
        self._quietly(lambda: self._store.finalize_namespace(namespace))

    def _delete(self, rt: ResourceType, obj: Obj, policy: str) -> None:
        meta = obj["metadata"]
        pre = {"uid": meta["uid"]}
        self._quietly(
            lambda: self._store.delete(rt, meta.get("namespace", ""), meta["name"], policy, pre)
        )

    def _edit(self, rt: ResourceType, obj: Obj, change: Callable[[Obj], Obj]) -> None:
        meta = obj["metadata"]
        self._quietly(
            lambda: self._store.mutate(rt, meta.get("namespace", ""), meta["name"], change)
        )

    @staticmethod
    def _quietly(action: Callable[[], object]) -> None:
        """Run a write; NotFound and Conflict mean someone else already acted."""
        try:
            action()
        except errors.ApiError as err:
            if err.code not in (404, 409):
                raise


def _set_refs(obj: Obj, keep: set[str]) -> Obj:
    refs = [r for r in _refs(obj) if str(r.get("uid")) in keep]
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)
    return obj


def _drop_finalizer(obj: Obj, name: str) -> Obj:
    obj["metadata"]["finalizers"] = [
        f for f in obj["metadata"].get("finalizers") or [] if f != name
    ]
    return obj
