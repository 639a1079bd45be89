"""A de-duplicating, delaying, rate-limited work queue (client-go's `workqueue`, in threads).

Contract, as client-go's: an item is queued at most once however often it is added (the dirty set);
an item handed out by `get()` is never handed to another worker until `done()` (the processing set);
adding it while it is processed queues it again once `done()` is called. `add_after` keeps only the
earliest pending time per item; `add_rate_limited` asks the rate limiter for the delay.

Unlike client-go, `add` cancels a pending `add_after` of the same item: a reconcile is level-based
(it reads everything anew and asks for its own next look), so the one `add` starts stands for the
delayed one, which would only repeat it later (a pod's Running batched for 0.1 s, then the job's
last pod Running queued at once, made two reconciles of which the second found nothing to do).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Hashable

from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.ratelimit import Clock, RateLimiter, default_controller_rate_limiter


class WorkQueue:
    """Thread-safe; any number of producers and workers. `get()` blocks until work or shutdown."""

    def __init__(
        self,
        name: str,
        rate_limiter: RateLimiter | None = None,
        metrics: OperatorMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._metrics = metrics
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        self._waiting: list[tuple[float, int, Hashable]] = []
        self._ready_at: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._shutting_down = False

    # --- producers ---------------------------------------------------------------------------
    def add(self, item: Hashable) -> None:
        """Queue `item` now; a pending `add_after` of it is cancelled (this one stands for it)."""
        with self._cond:
            if not self._shutting_down:
                self._ready_at.pop(item, None)  # its heap entry is skipped when it comes due
            self._add_locked(item)

    def add_after(self, item: Hashable, delay: float) -> None:
        """Queue `item` after `delay` seconds; an earlier pending time for it wins."""
        if delay <= 0:
            self.add(item)
            return
        with self._cond:
            if self._shutting_down:
                return
            ready = self._clock() + delay
            if ready >= self._ready_at.get(item, float("inf")):
                return
            self._ready_at[item] = ready
            heapq.heappush(self._waiting, (ready, next(self._seq), item))
            self._cond.notify_all()

    def add_rate_limited(self, item: Hashable) -> None:
        """Requeue after the rate limiter's delay (a retry: counted in workqueue_retries_total)."""
        if self._metrics:
            self._metrics.wq_retries.inc(name=self.name)
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: Hashable) -> None:
        """The item succeeded: reset its backoff."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.rate_limiter.retries(item)

    # --- workers -----------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next item (now exclusively the caller's until `done`), or None on shutdown/timeout.

        After `shutdown()` it returns None at once, even with items queued: a manager that stops
        (or lost its lease) must not start another reconcile.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                self._promote_ready_locked()
                if self._queue:
                    return self._take_locked()
                if deadline is not None and self._clock() >= deadline:
                    return None
                # A delayed item may come due between the clock reads above and this one: the
                # wait is then <= 0 and the loop promotes it. Only the deadline ends a get (a
                # get without one returned None here once, and its worker took that for shutdown).
                wait = self._next_wait_locked(deadline)
                if wait is None or wait > 0:
                    self._cond.wait(wait)

    def done(self, item: Hashable) -> None:
        with self._cond:
            self._processing.discard(item)
            started = self._started_at.pop(item, None)
            if self._metrics and started is not None:
                self._metrics.wq_work_duration.observe(self._clock() - started, name=self.name)
            if item in self._dirty:
                self._queue.append(item)
                self._set_depth_locked()
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def pending(self) -> int:
        """Queued plus delayed items (for tests and debugging)."""
        with self._cond:
            return len(self._queue) + len(self._ready_at)

    # --- internals ---------------------------------------------------------------------------
    def _add_locked(self, item: Hashable) -> None:
        if self._shutting_down or item in self._dirty:
            return
        if self._metrics:
            self._metrics.wq_adds.inc(name=self.name)
        self._dirty.add(item)
        self._added_at.setdefault(item, self._clock())
        if item in self._processing:
            return
        self._queue.append(item)
        self._set_depth_locked()
        self._cond.notify()

    def _take_locked(self) -> Hashable:
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        now = self._clock()
        self._started_at[item] = now
        added = self._added_at.pop(item, now)
        if self._metrics:
            self._metrics.wq_queue_duration.observe(now - added, name=self.name)
        self._set_depth_locked()
        return item

    def _promote_ready_locked(self) -> None:
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            ready, _, item = heapq.heappop(self._waiting)
            if self._ready_at.get(item) == ready:
                del self._ready_at[item]
                self._add_locked(item)

    def _next_wait_locked(self, deadline: float | None) -> float | None:
        now = self._clock()
        waits = [
            t - now
            for t in (deadline, self._waiting[0][0] if self._waiting else None)
            if t is not None
        ]
        return min(waits) if waits else None

    def _set_depth_locked(self) -> None:
        if self._metrics:
            self._metrics.wq_depth.set(len(self._queue), name=self.name)
