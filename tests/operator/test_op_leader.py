"""Leader election on a real Lease: one reconciler at a time, takeover when the leader goes away.

Each operator reaches the server through its own fault proxy, so a test can cut one off the
network (a partition) while the other keeps its connection.
"""

from __future__ import annotations

import copy
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from builders import minimal_job
from opkit import Cluster, RunningOperator, operator_process, wait_for

from trainop_core.operator.kube import ApiError
from trainop_core.operator.leader import LeaderElector
from trainop_core.operator.options import DEFAULT_LEADER_ELECTION_ID, LeaseTimings
from trainop_core.testing.faultproxy import FaultProxy

Start = Callable[..., RunningOperator]
LEASE = {"leader_elect": True}  # the Lease lives in the operator's namespace


def lease(cluster: Cluster) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{cluster.namespace}/leases"
    got: dict[str, Any] = cluster.rest.get(f"{path}/{DEFAULT_LEADER_ELECTION_ID}")
    return got


def reconciles(op: RunningOperator) -> float:
    total = op.manager.metrics.reconcile_total
    return sum(
        total.value(controller="pytorchjob-controller", result=r)
        for r in ("success", "error", "requeue", "requeue_after")
    )


def test_only_the_leader_reconciles_and_a_standby_takes_over_when_it_is_cut_off(
    cluster: Cluster, run_operator: Start
) -> None:
    cluster.rule("*", run_seconds=0.2)
    first = run_operator(**LEASE).wait_started()
    second = run_operator(**LEASE, proxy=cluster.new_proxy())
    wait_for(second.manager.caches_synced, what="standby caches warm")
    cluster.create_job(minimal_job("PyTorchJob", "one").build())
    cluster.wait_condition("PyTorchJob", "one", "Succeeded")
    assert reconciles(first) > 0 and reconciles(second) == 0
    assert not second.manager.workers_started
    assert lease(cluster)["spec"]["holderIdentity"] == first.manager.identity
    assert second.get("/readyz")[0] == 200  # a standby is ready, just not leading

    first.proxy.partition()  # the leader loses the API server: it cannot renew
    wait_for(lambda: first.exit_code == 1, timeout=20, what="old leader exits with 1")
    wait_for(lambda: second.manager.workers_started, timeout=20, what="standby takes over")
    cluster.create_job(minimal_job("PyTorchJob", "two").build())
    cluster.wait_condition("PyTorchJob", "two", "Succeeded")
    assert reconciles(second) > 0
    spec = lease(cluster)["spec"]
    assert spec["holderIdentity"] == second.manager.identity
    assert spec["leaseTransitions"] >= 1
    assert sum(cluster.pod_adds.values()) == 4  # two jobs, two pods each, none twice


def test_a_clean_shutdown_releases_the_lease_for_an_immediate_successor(
    cluster: Cluster, run_operator: Start
) -> None:
    first = run_operator(**LEASE, lease=_slow_lease()).wait_started()
    second = run_operator(**LEASE, lease=_slow_lease(), proxy=cluster.new_proxy())
    wait_for(second.manager.caches_synced, what="standby caches warm")
    started = time.monotonic()
    assert first.stop() == 0
    wait_for(lambda: second.manager.workers_started, timeout=10, what="successor leads")
    assert time.monotonic() - started < 15  # well inside the 15 s lease: it was released
    assert lease(cluster)["spec"]["holderIdentity"] == second.manager.identity


STALLS: dict[str, Callable[[FaultProxy], object]] = {
    # an overloaded server's priority and fairness (the old client waited out 10 x 5 s)
    "answered 429 with a long Retry-After": (
        lambda p: p.fail("*", "leases", code=429, count=None, retry_after=5)
    ),
    "left unanswered on a half-open connection": lambda p: p.hang("*", "leases", count=None),
}


@pytest.mark.parametrize("stall", STALLS.values(), ids=STALLS.keys())
def test_a_leader_whose_renewals_stall_writes_nothing_once_a_rival_can_have_the_lease(
    cluster: Cluster, run_operator: Start, stall: Callable[[FaultProxy], object]
) -> None:
    """The leader's lease requests stall: the rival takes the lease after a lease duration, and
    from then on not one write of the stalled leader reaches the server (pods, services, status,
    events), while the rival runs every job."""
    cluster.rule("*", run_seconds=0.2)
    first = run_operator(**LEASE).wait_started()
    second = run_operator(**LEASE, proxy=cluster.new_proxy())
    wait_for(second.manager.caches_synced, what="standby caches warm")
    stall(first.proxy)
    cluster.create_job(minimal_job("PyTorchJob", "during").build())  # while the lease runs out
    wait_for(lambda: second.manager.workers_started, timeout=20, what="the rival leads")
    acquired = min(
        at
        for at, info, code in second.proxy.stats.answered
        if info.resource == "leases" and info.verb in ("create", "update") and code < 300
    )
    cluster.create_job(minimal_job("PyTorchJob", "after").build())
    for name in ("during", "after"):
        cluster.wait_condition("PyTorchJob", name, "Succeeded")
    late_writes = [
        (info.verb, info.resource, info.name)
        for at, info, _ in first.proxy.stats.answered
        if at > acquired and info.verb not in ("get", "list", "watch") and info.resource != "leases"
    ]
    assert late_writes == []
    wait_for(lambda: first.exit_code == 1, timeout=10, what="the stalled leader exits with 1")
    assert lease(cluster)["spec"]["holderIdentity"] == second.manager.identity
    assert sum(cluster.pod_adds.values()) == 4  # two jobs, two pods each, none twice


class StuckStore:
    """A Lease in memory whose reads block while `stuck` is set (a renewal stuck in I/O)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.stuck, self.blocked, self.freed = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )

    def get(self) -> dict[str, Any]:
        if self.stuck.is_set():
            self.blocked.set()
            self.freed.wait(10)
            raise ApiError(0, "TransportError", "timed out")
        if self.lease is None:
            raise ApiError(404, "NotFound")
        return copy.deepcopy(self.lease)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.lease = copy.deepcopy(lease)
        return lease

    update = create


def test_the_lease_stops_being_held_at_the_renew_deadline_even_while_the_renewal_is_stuck() -> None:
    now = [100.0]
    store = StuckStore()
    timings = LeaseTimings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.01)
    elector = LeaderElector(store, "lease", "me", timings=timings, clock=lambda: now[0])
    stop, started = threading.Event(), threading.Event()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(elector.run(stop, started.set)))
    thread.start()
    started.wait(10)
    store.stuck.set()  # the attempt that starts now hangs
    store.blocked.wait(10)
    now[0] = 101.99  # 1.99 s after the last renewal started (at 100)
    assert elector.holds_lease()
    now[0] = 102.0  # the renew deadline: a rival may take the lease 1 s from now
    assert elector.is_leader and not elector.holds_lease()  # fenced, the renewal still stuck
    store.freed.set()
    thread.join(10)
    assert result == [True]  # leadership lost, and said so


def _slow_lease() -> Any:
    return LeaseTimings(15.0, 10.0, 0.2)


@pytest.mark.slow
def test_sigkilled_leader_process_is_replaced_by_the_standby_process(cluster: Cluster) -> None:
    flags = (
        "--leader-elect",
        "--leader-election-lease-duration",
        "3",
        "--leader-election-renew-deadline",
        "2",
        "--leader-election-retry-period",
        "0.3",
        "--enable-scheme",
        "PyTorchJob",
    )
    cluster.rule("*", run_seconds=0.2)
    first = operator_process(cluster, *flags)
    wait_for(lambda: _holder(cluster), timeout=60, what="a leader")
    second = operator_process(cluster, *flags, proxy=cluster.new_proxy())
    try:
        cluster.create_job(minimal_job("PyTorchJob", "before").build())
        cluster.wait_condition("PyTorchJob", "before", "Succeeded")
        holder = _holder(cluster)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        wait_for(lambda: _holder(cluster) not in ("", holder), timeout=60, what="new holder")
        cluster.create_job(minimal_job("PyTorchJob", "after").build())
        cluster.wait_condition("PyTorchJob", "after", "Succeeded")
        assert max(cluster.pod_adds.values()) == 1
        assert cluster.proxies[0].stats.requests[("update", "leases")] >= 1  # the new leader
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)


def _holder(cluster: Cluster) -> str:
    try:
        return str(lease(cluster)["spec"].get("holderIdentity") or "")
    except Exception:  # not created yet
        return ""
