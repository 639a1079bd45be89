"""Rate limiters: a token bucket (client QPS, the queue's overall limit) and per-item backoff.

These mirror client-go's `workqueue` limiters: `ItemExponentialBackoff` (5 ms doubling to 1000 s per
key), `TokenBucket` (qps/burst), and `MaxOf` combining them, as controller-runtime's default does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

Clock = Callable[[], float]


class RateLimiter(Protocol):
    """Decides how long an item must wait before it is retried."""

    def when(self, item: Hashable) -> float:
        """Seconds to wait before `item` may be processed again; records one more retry. No I/O."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking `item` (it succeeded). Idempotent."""
        ...

    def retries(self, item: Hashable) -> int:
        """How many times `item` has been rate-limited since it was last forgotten."""
        ...


class TokenBucket:
    """`qps` tokens per second, at most `burst` saved up. Thread-safe.

    `reserve()` takes a token now and returns how long the caller must wait for it (reservations
    queue up, as golang.org/x/time/rate does); `wait()` sleeps that long. qps <= 0 means unlimited.
    """

    def __init__(self, qps: float, burst: int, clock: Clock = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self, stop: threading.Event | None = None) -> float:
        """Block until a token is ours (or `stop` is set); returns the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            if stop is None:
                time.sleep(delay)
            else:
                stop.wait(delay)
        return delay

    def try_take(self) -> bool:
        """Take a token if one is spare now: saved up, and owed to no caller waiting in `wait`."""
        if self.qps <= 0:
            return True
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def wait_spare(self, stop: threading.Event | None = None, patience: float = 0.0) -> None:
        """Low priority: take a spare token as soon as there is one, but after `patience`
        seconds queue for one as `wait` does (or return once `stop` is set)."""
        deadline = self._clock() + patience
        while not self.try_take():
            left = deadline - self._clock()
            if left <= 0 or (stop is not None and stop.is_set()):
                self.wait(stop)
                return
            pause = min(left, self._until_spare())
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return

    def _until_spare(self) -> float:
        """Seconds until a token is spare if nobody else takes one (at least one token's time:
        no busy polling while callers of `wait` keep the bucket in debt)."""
        with self._lock:
            missing = 1.0 - self._tokens
        return max(missing, 1.0) / self.qps


class ItemExponentialBackoff:
    """`base * 2**failures` per item, capped at `cap` (client-go: 5 ms -> 1000 s)."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            n = self._failures.get(item, 0)
            self._failures[item] = n + 1
        if n > 62:  # 2**63 overflows float precision long after the cap is reached
            return self.cap
        return float(min(self.cap, self.base * (2**n)))

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def retries(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class BucketLimiter:
    """An overall token bucket as a RateLimiter: every retry of any item takes a token."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket

    def when(self, item: Hashable) -> float:
        return self.bucket.reserve()

    def forget(self, item: Hashable) -> None:
        return None

    def retries(self, item: Hashable) -> int:
        return 0


class MaxOf:
    """The longest wait any of `limiters` asks for (controller-runtime's default combination)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def retries(self, item: Hashable) -> int:
        return max(limiter.retries(item) for limiter in self.limiters)


def default_controller_rate_limiter(
    base: float = 0.005, cap: float = 1000.0, qps: float = 10.0, burst: int = 100
) -> MaxOf:
    """client-go's DefaultControllerRateLimiter: per-item 5 ms..1000 s, overall 10 qps burst 100."""
    return MaxOf(ItemExponentialBackoff(base, cap), BucketLimiter(TokenBucket(qps, burst)))
