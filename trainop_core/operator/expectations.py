"""Expectations: how many creations/deletions of a job's children the cache has yet to show.

kube-controller-manager's `ControllerExpectations`, as training-operator uses them. A
controller raises expectations *before* it creates or deletes pods/services; informer events
lower them. While a key is unsatisfied the controller must not act on its (stale) cache, which
is what stops a slow watch from causing a duplicate pod. Expectations older than `ttl` (5
minutes) count as satisfied, so a lost event cannot wedge a job forever.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from trainop_core.operator.ratelimit import Clock

EXPECTATIONS_TTL = 300.0


@dataclass
class _Expectation:
    adds: int
    dels: int
    set_at: float


class Expectations:
    """Thread-safe counters keyed by an opaque string (e.g. `PyTorchJob/ns/name/pods`)."""

    def __init__(self, ttl: float = EXPECTATIONS_TTL, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._items: dict[str, _Expectation] = {}

    def expect(self, key: str, adds: int = 0, dels: int = 0) -> None:
        """Replace the expectations of `key` (called before issuing the API calls)."""
        with self._lock:
            self._items[key] = _Expectation(adds, dels, self._clock())

    def observed_creation(self, key: str) -> None:
        self._lower(key, adds=1)

    def observed_deletion(self, key: str) -> None:
        self._lower(key, dels=1)

    def satisfied(self, key: str) -> bool:
        """True when nothing is outstanding, nothing was ever expected, or the record expired."""
        with self._lock:
            exp = self._items.get(key)
            if exp is None:
                return True
            if exp.adds <= 0 and exp.dels <= 0:
                return True
            return self._clock() - exp.set_at > self.ttl

    def forget(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def forget_prefix(self, prefix: str) -> None:
        """Drop every key of a deleted job."""
        with self._lock:
            for key in [k for k in self._items if k.startswith(prefix)]:
                del self._items[key]

    def _lower(self, key: str, adds: int = 0, dels: int = 0) -> None:
        with self._lock:
            exp = self._items.get(key)
            if exp is not None:
                exp.adds -= adds
                exp.dels -= dels
