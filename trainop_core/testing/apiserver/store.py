"""The object store: objects, the global resourceVersion, bounded history, and listeners.

Contract:
- One re-entrant lock guards everything. Stored dicts are never mutated after they are
  committed, so callers may read (and serialise) what they get back without the lock, but
  must copy before changing anything.
- Every committed write takes the next global resourceVersion and emits exactly one
  :class:`Event` to the bounded history and to every listener, in order, under the lock.
  Listeners must only enqueue.
- Write semantics follow kube-apiserver: optimistic concurrency, status subresource rules,
  generation, finalizers and deletionTimestamp, no-op updates that write nothing.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import errors, meta
from .events import Event, Obj, Watcher
from .paging import decode_continue, encode_continue
from .resources import Registry, ResourceType, builtin_types, crd_types
from .selectors import FieldSelector, LabelSelector
from .validation import default_kind

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Listener = Callable[[Event], None]
POLICIES = ("Foreground", "Background", "Orphan")
EVERYTHING = LabelSelector()
ANY_FIELDS = FieldSelector()


@dataclass(frozen=True)
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str
    remaining: int | None


def _key(obj: Obj) -> Key:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def _finalizers(rt: ResourceType, obj: Obj) -> list[str]:
    names = list(obj["metadata"].get("finalizers") or [])
    if rt.plural == "namespaces" and not rt.group:
        names += obj.get("spec", {}).get("finalizers") or []
    return names


class Store:
    """All objects of a fake cluster; see the module docstring for the contract."""

    def __init__(self, history_size: int = 50_000) -> None:
        self.lock = threading.RLock()
        self.registry = Registry(builtin_types())
        self._rv = 1
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._by_uid: dict[str, tuple[ResourceType, Key]] = {}
        self._dependents: dict[str, set[tuple[ResourceType, Key]]] = {}
        self._history: deque[Event] = deque(maxlen=max(1, history_size))
        self._compacted_rv = 0
        self._listeners: list[Listener] = []

    # ----------------------------------------------------------------- reads
    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def resolve(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self.lock:
            return self.registry.lookup(group, version, plural)

    def resource(self, plural: str, group: str = "") -> ResourceType:
        """A served type for in-process callers (any version); raise 404 if not served."""
        with self.lock:
            rt = self.registry.storage_type(group, plural)
        if rt is None:
            raise errors.not_found(plural, "", group)
        return rt

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self._objects.get(rt.key, {}).get((namespace if rt.namespaced else "", name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        found = self.find(rt, namespace, name)
        if found is None:
            raise errors.not_found(rt.plural, name, rt.group)
        return found

    def by_uid(self, uid: str) -> tuple[ResourceType, Obj] | None:
        with self.lock:
            entry = self._by_uid.get(uid)
            if entry is None:
                return None
            rt, key = entry
            return rt, self._objects[rt.key][key]

    def dependents(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        """Objects whose ownerReferences name ``uid``."""
        with self.lock:
            refs = self._dependents.get(uid, set())
            return [(rt, self._objects[rt.key][key]) for rt, key in refs]

    def namespace_contents(self, namespace: str) -> list[tuple[ResourceType, Obj]]:
        """Every object stored in ``namespace``, with a served type for each."""
        with self.lock:
            result: list[tuple[ResourceType, Obj]] = []
            for rkey, bucket in self._objects.items():
                rt = self.registry.storage_type(*rkey)
                if rt is not None:
                    result += [(rt, obj) for (ns, _), obj in bucket.items() if ns == namespace]
            return result

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector = EVERYTHING,
        fields: FieldSelector = ANY_FIELDS,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListResult:
        """Matching objects ordered by (namespace, name), paged by ``limit``/``continue``."""
        start: Key | None = None
        with self.lock:
            rv = self._rv
            if continue_token:
                rv, start = decode_continue(continue_token, self._compacted_rv)
            bucket = self._objects.get(rt.key, {})
            keys = sorted(k for k in bucket if not namespace or k[0] == namespace)
            snapshot = [bucket[k] for k in keys if start is None or k > start]
        items: list[Obj] = []
        for index, obj in enumerate(snapshot):
            if not (labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)):
                continue
            if limit and len(items) == limit:
                token = encode_continue(rv, _key(items[-1]))
                plain = not labels.requirements and not fields.terms
                return ListResult(items, str(rv), token, len(snapshot) - index if plain else None)
            items.append(obj)
        return ListResult(items, str(rv), "", None)

    # ---------------------------------------------------------------- writes
    def create(self, rt: ResourceType, namespace: str, body: Obj) -> Obj:
        """Create ``body``; 409 AlreadyExists, 404/403 for a missing/terminating namespace."""
        obj = meta.prepare_create(rt, namespace, body)
        default_kind(rt, obj, None)
        with self.lock:
            if rt.namespaced:
                self._check_namespace(namespace)
            objmeta = obj["metadata"]
            if not objmeta.get("name") and objmeta.get("generateName"):
                bucket = self._objects.get(rt.key, {})
                while not objmeta.get("name") or (namespace, objmeta["name"]) in bucket:
                    objmeta["name"] = meta.generate_name(objmeta["generateName"])
            meta.validate(rt, obj, None)
            if self.find(rt, namespace, objmeta["name"]) is not None:
                raise errors.already_exists(rt.plural, objmeta["name"], rt.group)
            return self._commit(rt, None, obj)

    def _check_namespace(self, namespace: str) -> None:
        ns = self._objects.get(("", "namespaces"), {}).get(("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated"
            )

    def update(
        self, rt: ResourceType, namespace: str, name: str, body: Obj, subresource: str | None = None
    ) -> Obj:
        """PUT semantics: stale resourceVersion → 409; missing → 404 (or create if allowed)."""
        with self.lock:
            old = self.find(rt, namespace, name)
            if old is None:
                if rt.create_on_update and subresource is None:
                    body = {**body, "metadata": {**body.get("metadata", {}), "name": name}}
                    return self.create(rt, namespace, body)
                raise errors.not_found(rt.plural, name, rt.group)
            return self._update(rt, old, body, subresource)

    def mutate(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj],
        subresource: str | None = None,
    ) -> Obj:
        """Atomically apply ``change`` to a private copy of the current object and update."""
        with self.lock:
            old = self.get(rt, namespace, name)
            return self._update(rt, old, change(copy.deepcopy(old)), subresource)

    def _update(self, rt: ResourceType, old: Obj, body: Obj, subresource: str | None) -> Obj:
        new = meta.prepare_update(rt, old, body, subresource)
        if subresource is None:
            default_kind(rt, new, old)
        meta.validate(rt, new, old)
        if old["metadata"].get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or []) - set(
                old["metadata"].get("finalizers") or []
            )
            if added:
                raise errors.invalid(
                    rt.kind,
                    old["metadata"]["name"],
                    [
                        (
                            "metadata.finalizers",
                            "Forbidden: no new finalizers can be added if the object is being "
                            "deleted",
                        )
                    ],
                    rt.group,
                )
        if rt.tracks_generation and meta.spec_changed(rt, old, new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if meta.same_content(old, new):
            return old
        return self._commit(rt, old, new)

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[Obj, bool]:
        """Delete; returns ``(object, removed)``. Finalizers only set deletionTimestamp."""
        if propagation is not None and propagation not in POLICIES:
            raise errors.bad_request(f"unsupported propagationPolicy {propagation!r}")
        with self.lock:
            old = self.get(rt, namespace, name)
            meta.check_preconditions(rt, old, preconditions or {})
            old_meta = old["metadata"]
            if old_meta.get("deletionTimestamp"):
                return old, False
            finalizers = list(old_meta.get("finalizers") or [])
            extra = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(propagation or "")
            if extra and extra not in finalizers:
                finalizers.append(extra)
            is_namespace = rt.plural == "namespaces" and not rt.group
            if not finalizers and not is_namespace:
                return self._remove(rt, old), True
            new = copy.deepcopy(old)
            new["metadata"].update(deletionTimestamp=meta.now_iso(), deletionGracePeriodSeconds=0)
            if finalizers:
                new["metadata"]["finalizers"] = finalizers
            if is_namespace:
                new.setdefault("status", {})["phase"] = "Terminating"
            if rt.tracks_generation:
                new["metadata"]["generation"] = old_meta.get("generation", 1) + 1
            return self._commit(rt, old, new), False

    def finalize_namespace(self, name: str) -> None:
        """Drop the ``kubernetes`` spec finalizer of a terminating namespace (removes it)."""
        rt = self.resource("namespaces")
        with self.lock:
            old = self.get(rt, "", name)
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["finalizers"] = []
            self._commit(rt, old, new)

    # -------------------------------------------------------------- commit
    def _commit(self, rt: ResourceType, old: Obj | None, new: Obj) -> Obj:
        deleting = old is not None and old["metadata"].get("deletionTimestamp")
        if deleting and not _finalizers(rt, new):
            return self._remove(rt, new)
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        key = _key(new)
        self._objects.setdefault(rt.key, {})[key] = new
        self._index(rt, key, old, new)
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self.registry.set_crd(new["metadata"]["name"], crd_types(new))
        self._emit(Event(self._rv, rt.key, "ADDED" if old is None else "MODIFIED", new, old))
        return new

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        self._rv += 1
        final = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
        key = _key(final)
        current = self._objects[rt.key].pop(key)
        self._index(rt, key, current, None)
        self._emit(Event(self._rv, rt.key, "DELETED", final))
        if rt.plural == "customresourcedefinitions" and rt.group == "apiextensions.k8s.io":
            self._purge_crd(final)
        return final

    def _purge_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        rkey = (spec.get("group", ""), spec.get("names", {}).get("plural", ""))
        rt = self.registry.storage_type(*rkey)
        if rt is not None:
            for obj in list(self._objects.get(rkey, {}).values()):
                self._remove(rt, obj)
        self._objects.pop(rkey, None)
        self.registry.remove_crd(crd["metadata"]["name"])

    def _index(self, rt: ResourceType, key: Key, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            uid = obj["metadata"]["uid"]
            if add:
                self._by_uid[uid] = (rt, key)
            else:
                self._by_uid.pop(uid, None)
            for ref in obj["metadata"].get("ownerReferences") or []:
                deps = self._dependents.setdefault(ref.get("uid", ""), set())
                if add:
                    deps.add((rt, key))
                else:
                    deps.discard((rt, key))
                    if not deps:
                        del self._dependents[ref.get("uid", "")]

    # --------------------------------------------------------------- events
    def _emit(self, event: Event) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(event)
        for listener in list(self._listeners):
            listener(event)

    def subscribe(self, listener: Listener) -> None:
        with self.lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with self.lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def start_watch(
        self, watcher: Watcher, resource_version: str | None, initial_events: bool = False
    ) -> None:
        """Queue the events ``watcher`` missed since ``resource_version`` and subscribe it.

        Unset or "0", or ``initial_events`` (``sendInitialEvents=true``, a streaming list):
        synthetic ADDED for every current object; with ``initial_events`` they are followed by
        a BOOKMARK annotated ``k8s.io/initial-events-end``. Older than the retained history:
        410 Expired (raised). All of it happens atomically with subscribing.
        """
        with self.lock:
            if initial_events or resource_version in (None, "", "0"):
                bucket = self._objects.get(watcher.rkey, {})
                for key in sorted(bucket):
                    watcher.offer_initial(bucket[key])
                if initial_events:
                    watcher.offer_initial_events_end(str(self._rv))
            else:
                since = self._parse_rv(resource_version)
                if since < self._compacted_rv:
                    raise errors.expired(
                        f"too old resource version: {since} ({self._compacted_rv + 1})"
                    )
                missed = []
                for event in reversed(self._history):
                    if event.rv <= since:
                        break
                    missed.append(event)
                for event in reversed(missed):
                    watcher.offer(event)
            self._listeners.append(watcher.offer)

    @staticmethod
    def _parse_rv(text: str) -> int:
        try:
            return int(text)
        except ValueError as exc:
            raise errors.bad_request(f"invalid resourceVersion {text!r}") from exc

    def idle_resource_version(self, watcher: Watcher) -> str | None:
        """The current RV if ``watcher`` has nothing pending (safe for a BOOKMARK), else None."""
        with self.lock:
            return str(self._rv) if watcher.queue.empty() else None

    def expire_history(self) -> None:
        """Forget all history: any resourceVersion or continue token issued so far gets 410.

        The counter moves on by one (as compaction does in etcd) so lists and watches
        started afterwards are unaffected.
        """
        with self.lock:
            self._rv += 1
            self._compacted_rv = self._rv
            self._history.clear()

    def set_history_size(self, size: int) -> None:
        with self.lock:
            kept = list(self._history)[-max(1, size) :]
            if len(kept) < len(self._history):
                self._compacted_rv = self._history[len(self._history) - len(kept) - 1].rv
            self._history = deque(kept, maxlen=max(1, size))
