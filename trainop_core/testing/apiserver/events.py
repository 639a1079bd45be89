"""Change events and watchers: what the store emits and how one watch filters it.

The store calls :meth:`Watcher.offer` under its lock; an offer only enqueues, so no socket is
ever written while the lock is held. A watcher turns an object that stops matching its
selectors into a DELETED event, as the real watch cache does.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any

from .selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
CUT = "CUT"  # sentinel: abruptly close the stream (fault injection)
STOP = "STOP"
INITIAL_EVENTS_END = (
    "k8s.io/initial-events-end"  # sentinel: end the stream cleanly (server shutdown)
)


@dataclass(frozen=True)
class Event:
    """One committed change; ``obj`` carries the event's resourceVersion."""

    rv: int
    rkey: tuple[str, str]
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None = None


class Watcher:
    """A per-watch queue of ``(type, object)`` pairs, filtered by namespace and selectors."""

    def __init__(
        self,
        rkey: tuple[str, str],
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        plural: str = "",
    ) -> None:
        self.rkey = rkey
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.plural = plural
        self.queue: queue.SimpleQueue[tuple[str, Obj] | str] = queue.SimpleQueue()

    def matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def offer(self, event: Event) -> None:
        """Enqueue what this watch should see of ``event``; called with the store lock held."""
        if event.rkey != self.rkey:
            return
        now = self.matches(event.obj)
        if event.type != "MODIFIED" or event.old is None:
            if now:
                self.queue.put((event.type, event.obj))
            return
        before = self.matches(event.old)
        if now:
            self.queue.put(("MODIFIED" if before else "ADDED", event.obj))
        elif before:
            gone = {**event.old, "metadata": {**event.old["metadata"]}}
            gone["metadata"]["resourceVersion"] = event.obj["metadata"]["resourceVersion"]
            self.queue.put(("DELETED", gone))

    def offer_initial(self, obj: Obj) -> None:
        if self.matches(obj):
            self.queue.put(("ADDED", obj))

    def offer_initial_events_end(self, rv: str) -> None:
        """The bookmark that ends the initial events of a streaming list (watch-list)."""
        meta = {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}}
        self.queue.put(("BOOKMARK", {"metadata": meta}))

    def cut(self) -> None:
        self.queue.put(CUT)

    def stop(self) -> None:
        self.queue.put(STOP)
