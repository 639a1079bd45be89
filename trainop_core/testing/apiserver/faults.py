"""Fault injection and request accounting for reliability tests and benchmarks.

A :class:`FaultRule` matches requests by verb (``get list watch create update patch delete
deletecollection``), resource (an ``fnmatch`` pattern over ``plural`` or ``plural/subresource``:
``"pods"`` matches only the main resource, ``"pods*"`` also its subresources), and optionally
namespace and name. Each matching request consumes one unit of ``count`` (``None`` = forever).
"""

from __future__ import annotations

import fnmatch
import threading
from collections import Counter
from dataclasses import dataclass, field

from .events import Watcher
from .store import Store


@dataclass
class FaultRule:
    """What to do to matching requests: fail with ``code``, sleep ``delay``, or cut a watch."""

    verb: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    code: int | None = None
    retry_after: float | None = None
    message: str | None = None
    delay: float = 0.0
    cut_after_events: int | None = None
    count: int | None = 1
    hits: int = 0

    def matches(self, verb: str, resource: str, namespace: str, name: str) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or fnmatch.fnmatchcase(resource, self.resource))
            and (self.namespace is None or self.namespace == namespace)
            and (self.name is None or self.name == name)
        )


@dataclass
class Stats:
    """Request counters keyed by ``(verb, resource)`` and watch-connection gauges."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    open_watches: int = 0
    total_watches: int = 0
    watch_events_sent: int = 0

    def by_verb(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for (verb, _), n in self.requests.items():
            totals[verb] += n
        return dict(totals)


class Faults:
    """Thread-safe rule set plus the open-watch registry used to cut streams."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._watches: dict[Watcher, str] = {}
        self._infrastructure: set[Watcher] = set()  # the kubelet stand-in's: never cut or counted
        self.stats = Stats()

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        code: int = 500,
        count: int | None = 1,
        retry_after: float | None = None,
        message: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> FaultRule:
        """Answer the next ``count`` matching requests with ``code`` (429 adds Retry-After)."""
        if code == 429 and retry_after is None:
            retry_after = 1
        return self.add(
            FaultRule(verb, resource, namespace, name, code, retry_after, message, count=count)
        )

    def delay(
        self,
        verb: str | None = None,
        resource: str | None = None,
        *,
        seconds: float,
        count: int | None = 1,
        namespace: str | None = None,
        name: str | None = None,
    ) -> FaultRule:
        """Sleep ``seconds`` before serving the next ``count`` matching requests."""
        return self.add(FaultRule(verb, resource, namespace, name, delay=seconds, count=count))

    def cut_watch(
        self, resource: str | None = None, *, after_events: int = 0, count: int | None = 1
    ) -> FaultRule:
        """Abruptly close the next ``count`` watches on ``resource`` after ``after_events``."""
        return self.add(FaultRule("watch", resource, cut_after_events=after_events, count=count))

    def cut_open_watches(self, resource: str | None = None) -> int:
        """Abruptly close every open watch stream (on ``resource`` if given); return how many."""
        with self._lock:
            chosen = [
                w
                for w, res in self._watches.items()
                if resource is None or fnmatch.fnmatchcase(res, resource)
            ]
        for watcher in chosen:
            watcher.cut()
        return len(chosen)

    def expire_history(self) -> None:
        """Force 410 Gone for every watch or continue token older than now."""
        self._store.expire_history()

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, verb: str, resource: str, namespace: str, name: str) -> list[FaultRule]:
        """Rules matching one request, consuming one unit of each rule's count."""
        with self._lock:
            self.stats.requests[(verb, resource)] += 1
            hit = [r for r in self._rules if r.matches(verb, resource, namespace, name)]
            for rule in hit:
                rule.hits += 1
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count <= 0:
                        self._rules.remove(rule)
            return hit

    def watch_opened(self, watcher: Watcher, resource: str, infrastructure: bool = False) -> None:
        with self._lock:
            if infrastructure:
                self._infrastructure.add(watcher)
                return
            self._watches[watcher] = resource
            self.stats.open_watches += 1
            self.stats.total_watches += 1

    def watch_closed(
        self, watcher: Watcher, events_sent: int, infrastructure: bool = False
    ) -> None:
        with self._lock:
            if infrastructure:
                self._infrastructure.discard(watcher)
                return
            self._watches.pop(watcher, None)
            self.stats.open_watches -= 1
            self.stats.watch_events_sent += events_sent

    def stop_all_watches(self) -> None:
        with self._lock:
            watchers = [*self._watches, *self._infrastructure]
        for watcher in watchers:
            watcher.stop()
