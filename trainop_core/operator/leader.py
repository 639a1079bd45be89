"""Leader election on a `coordination.k8s.io/v1` Lease (client-go's algorithm, our own ~150 lines).

Timings default to controller-runtime's: lease 15 s, renew deadline 10 s, retry every 2 s.
A candidate takes the lease when it is free (no holder) or when the record it last observed has not
changed for a whole lease duration (measured on the local monotonic clock, as client-go does, so
clock skew between nodes does not matter). Every write carries the resourceVersion it read, so two
candidates can never both win. The leader renews every retry period; if no renewal succeeds within
the renew deadline, leadership is lost: `run()` returns True and the manager stops reconciling at
once and exits non-zero (controller-runtime's behaviour; the Deployment restarts the pod, which
then competes again). On a clean stop the lease is released so a successor need not wait.

Leadership cannot overlap. `holds_lease()`, which the manager's writers ask before every write, is
true only until the renew deadline after the start of the last successful renewal: a rival can
take the lease no sooner than a lease duration after it last saw that renewal, which it read after
it was written, so this process stops writing (lease duration - renew deadline) earlier, whatever
its renewal thread is blocked on. Renewals go through a client of their own that waits out no
Retry-After (a renewal answered late is a renewal failed), and a renewal that finds another holder
ends leadership at once.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol

from trainop_core.operator.kube import LEASES, ApiError, KubeClient, Obj
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.options import LeaseTimings
from trainop_core.operator.ratelimit import Clock

log = logging.getLogger(__name__)


class LeaseStore(Protocol):
    """Reads and writes one Lease object. Each call does I/O and raises ApiError."""

    def get(self) -> Obj:
        """The Lease (404 ApiError when it does not exist)."""
        ...

    def create(self, lease: Obj) -> Obj:
        """Create it (409 AlreadyExists when another candidate was first)."""
        ...

    def update(self, lease: Obj) -> Obj:
        """Replace it; 409 Conflict unless metadata.resourceVersion is still current."""
        ...


class RestLeaseStore:
    """The Lease through `client`; give it a client of its own that waits out no Retry-After
    (``retries=0``) and is not paced with the other requests, so a renewal fails in time."""

    def __init__(self, client: KubeClient, namespace: str, name: str, timeout: float) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.timeout = (timeout, timeout)

    def get(self) -> Obj:
        return self.client.request(
            "GET", LEASES.path(self.namespace, self.name), timeout=self.timeout
        )

    def create(self, lease: Obj) -> Obj:
        return self.client.request(
            "POST", LEASES.path(self.namespace), body=lease, timeout=self.timeout
        )

    def update(self, lease: Obj) -> Obj:
        return self.client.request(
            "PUT", LEASES.path(self.namespace, self.name), body=lease, timeout=self.timeout
        )


def new_identity() -> str:
    """hostname + "_" + a UUID, as controller-runtime's default."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for one Lease; `is_leader` is True only between acquisition and loss/stop."""

    def __init__(
        self,
        store: LeaseStore,
        name: str,
        identity: str,
        namespace: str = "",
        timings: LeaseTimings | None = None,
        metrics: OperatorMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.store, self.name, self.identity, self.namespace = store, name, identity, namespace
        self.timings = timings or LeaseTimings()
        self.metrics = metrics
        self._clock = clock
        self._observed: tuple[str, str] = ("", "")  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._valid_until = 0.0  # monotonic: the renew deadline after the last renewal started
        self._leading = threading.Event()

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def holds_lease(self) -> bool:
        """Leading, and surely still: no rival can have taken the lease yet (thread-safe)."""
        return self._leading.is_set() and self._clock() < self._valid_until

    def run(self, stop: threading.Event, on_started: Callable[[], None]) -> bool:
        """Campaign until leader, call `on_started`, renew; True if leadership was lost."""
        if not self._acquire(stop):
            return False
        self._set_leading(True)
        log.info("became leader of lease %s as %s", self.name, self.identity)
        on_started()
        lost = self._renew_until_lost(stop)
        self._set_leading(False)
        if lost:
            log.error("lost leadership of lease %s", self.name)
        else:
            self._release()
        return lost

    # --- the two loops -----------------------------------------------------------------------
    def _acquire(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self._attempt():
                return True
            stop.wait(self.timings.retry_period * random.uniform(1.0, 1.2))
        return False

    def _renew_until_lost(self, stop: threading.Event) -> bool:
        while not stop.wait(self.timings.retry_period):
            if self._attempt():
                continue
            if self._clock() >= self._valid_until or self._observed[0] not in ("", self.identity):
                return True  # out of time, or another candidate holds it already
        return False

    # --- one attempt -------------------------------------------------------------------------
    def _attempt(self) -> bool:
        """One acquire-or-renew; on success the lease is ours until the renew deadline after
        the moment it was tried (before the write that the rivals will see)."""
        started = self._clock()
        if not self._try_acquire_or_renew():
            return False
        self._valid_until = started + self.timings.renew_deadline
        return True

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease = self.store.get()
        except ApiError as exc:
            if not exc.not_found:
                log.info("lease %s: get failed: %s", self.name, exc)
                return False
            return self._write(self.store.create, self._new_lease(), "create")
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity") or ""
        self._observe(holder, str(spec.get("renewTime", "")))
        if holder and holder != self.identity and not self._expired():
            return False
        transitions = int(spec.get("leaseTransitions", 0)) + (0 if holder == self.identity else 1)
        lease["spec"] = self._spec(
            transitions, spec.get("acquireTime") if holder == self.identity else None
        )
        return self._write(self.store.update, lease, "update")

    def _write(self, call: Callable[[Obj], Obj], lease: Obj, verb: str) -> bool:
        try:
            written = call(lease)
        except ApiError as exc:
            log.info("lease %s: %s failed: %s", self.name, verb, exc)
            return False
        spec = written.get("spec", {})
        self._observe(str(spec.get("holderIdentity", "")), str(spec.get("renewTime", "")))
        return True

    def _observe(self, holder: str, renew_time: str) -> None:
        if (holder, renew_time) != self._observed:
            self._observed = (holder, renew_time)
            self._observed_at = self._clock()

    def _expired(self) -> bool:
        return self._clock() - self._observed_at > self.timings.lease_duration

    def _new_lease(self) -> Obj:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(0, None),
        }

    def _spec(self, transitions: int, acquired: object) -> Obj:
        now = micro_time()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timings.lease_duration)),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _release(self) -> None:
        try:
            lease = self.store.get()
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
            self.store.update(lease)
        except ApiError as exc:
            log.info("lease %s: release failed: %s", self.name, exc)

    def _set_leading(self, leading: bool) -> None:
        if leading:
            self._leading.set()
        else:
            self._leading.clear()
        if self.metrics:
            self.metrics.leader.set(1 if leading else 0, name=self.name)
