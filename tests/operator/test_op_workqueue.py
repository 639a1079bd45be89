"""The work queue, rate limiters and expectations: plain objects with an injected clock."""

from __future__ import annotations

import threading
import time

import pytest

from trainop_core.operator.expectations import Expectations
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.ratelimit import (
    ItemExponentialBackoff,
    TokenBucket,
    default_controller_rate_limiter,
)
from trainop_core.operator.workqueue import WorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_item_added_many_times_is_queued_once() -> None:
    q = WorkQueue("t")
    for _ in range(5):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(0) == "a"
    assert q.get(0) == "b"
    assert q.get(0.01) is None


def test_an_item_is_never_handed_to_two_workers_and_re_adding_requeues_it_after_done() -> None:
    q = WorkQueue("t")
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # changed while being processed
    assert q.get(0.01) is None  # not handed out again meanwhile
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0.01) is None


def test_concurrent_workers_never_overlap_on_one_key() -> None:
    q = WorkQueue("t")
    active: set[str] = set()
    overlaps: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while (item := q.get(0.3)) is not None:
            with lock:
                if item in active:
                    overlaps.append(str(item))
                active.add(str(item))
            time.sleep(0.001)
            with lock:
                active.discard(str(item))
            q.done(item)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(300):
        q.add(f"k{i % 3}")
    for t in threads:
        t.join()
    assert overlaps == []


def test_add_after_keeps_the_earliest_time_and_waits_for_it() -> None:
    clock = FakeClock()
    q = WorkQueue("t", clock=clock)
    q.add_after("a", 10)
    q.add_after("a", 5)
    q.add_after("a", 20)
    assert q.get(0) is None
    clock.now += 5
    assert q.get(0) == "a"


class ScriptedClock:
    """Answers `reads` one per call, then `then`: time passes between two reads of one call."""

    def __init__(self, reads: list[float], then: float) -> None:
        self.reads, self.then = list(reads), then

    def __call__(self) -> float:
        return self.reads.pop(0) if self.reads else self.then


def test_a_get_without_timeout_hands_out_an_item_that_came_due_between_two_clock_reads() -> None:
    """The 10,000-job benchmark's trainop run stalled every XGBoostJob after about 4,000: the
    controller's only worker had ended. `get()` read the clock to promote due items and again
    to compute its wait; an item that came due in between made the wait <= 0, which `get()` took
    for a timeout, and answered None, which the worker took for shutdown."""
    clock = ScriptedClock([100.0, 100.9999, 101.0001], then=101.0002)
    q = WorkQueue("t", clock=clock)
    q.add_after("a", 1.0)  # due at 101.0; the get's first read is before, its second after
    assert q.get() == "a"


def test_a_get_with_a_timeout_still_ends_at_its_deadline() -> None:
    q = WorkQueue("t")  # the real clock
    q.add_after("a", 10)
    started = time.monotonic()
    assert q.get(0.05) is None
    assert 0.05 <= time.monotonic() - started < 5


def test_add_cancels_a_pending_add_after_which_would_only_repeat_the_reconcile() -> None:
    clock = FakeClock()
    q = WorkQueue("t", clock=clock)
    q.add_after("a", 0.1)  # e.g. a pod's Running, batched
    q.add("a")  # the job's last pod Running: at once
    assert q.get(0) == "a"
    q.done("a")
    clock.now += 1
    assert q.get(0) is None  # the batched add was cancelled, not run a second time
    assert q.pending() == 0
    q.add_after("a", 5)  # a later delay is kept (the cancelled entry does not shadow it)
    clock.now += 5
    assert q.get(0) == "a"


def test_rate_limited_retries_back_off_exponentially_and_forget_resets() -> None:
    backoff = ItemExponentialBackoff(0.005, 1000)
    assert [backoff.when("a") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert backoff.retries("a") == 4
    assert backoff.when("b") == 0.005  # per item
    for _ in range(100):
        last = backoff.when("a")
    assert last == 1000
    backoff.forget("a")
    assert backoff.when("a") == 0.005


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)  # reservations queue up
    clock.now += 10
    assert bucket.reserve() == 0


def test_spare_tokens_go_only_to_what_no_waiting_caller_is_owed() -> None:
    """A reconcile never waits behind an event: an event waits for a spare token (or its
    patience), and takes none while callers of `wait` are owed tokens."""
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    assert bucket.try_take()
    assert bucket.reserve() == 0
    assert not bucket.try_take()  # none left
    assert bucket.reserve() == pytest.approx(0.1)  # a reconcile queues for the next one
    clock.now += 0.15
    assert not bucket.try_take()  # the token that came is owed to that reconcile
    clock.now += 0.1
    assert bucket.try_take()


def test_the_default_controller_limiter_is_the_max_of_backoff_and_the_overall_bucket() -> None:
    limiter = default_controller_rate_limiter()
    delays = [limiter.when(f"item-{i}") for i in range(101)]
    assert delays[0] == 0.005
    assert delays[100] > 0.005  # the 101st retry in a burst waits for the 10 qps bucket


def test_queue_metrics_count_adds_retries_depth_and_durations() -> None:
    metrics = OperatorMetrics()
    q = WorkQueue("jobs", metrics=metrics)
    q.add("a")
    q.add("b")
    assert metrics.wq_depth.value(name="jobs") == 2
    item = q.get(0)
    q.done(item)
    q.add_rate_limited("c")
    assert metrics.wq_adds.value(name="jobs") == 2
    assert metrics.wq_retries.value(name="jobs") == 1
    assert metrics.wq_queue_duration.count(name="jobs") == 1
    assert metrics.wq_work_duration.count(name="jobs") == 1


def test_shutdown_stops_handing_out_work_at_once() -> None:
    q = WorkQueue("t")
    q.add("a")
    q.shutdown()
    assert q.get() is None


def test_expectations_block_until_observed_or_expired() -> None:
    clock = FakeClock()
    exp = Expectations(ttl=300, clock=clock)
    assert exp.satisfied("job/pods")
    exp.expect("job/pods", adds=2, dels=1)
    exp.observed_creation("job/pods")
    exp.observed_deletion("job/pods")
    assert not exp.satisfied("job/pods")
    exp.observed_creation("job/pods")
    assert exp.satisfied("job/pods")
    exp.expect("job/pods", adds=1)
    clock.now += 301
    assert exp.satisfied("job/pods")  # a lost event cannot wedge the job
