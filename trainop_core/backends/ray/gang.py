"""The Ray resources of one job: its placement group and one actor per replica (a "slot").

`Gang` only observes and applies; the supervisor decides when. Placing is all or nothing:
the placement group reserves every bundle or none, then every missing actor is created in its
bundle and asked for its address. Both steps count against the job's schedule timeout, and
both can be interrupted (a user stops or deletes the job meanwhile).

Everything here is created by the job's supervisor actor and fate-shares with it: if the
supervisor is killed, Ray removes the placement group and the replicas' actors, whose processes
die with them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainop_core.backends.ray.placement import Placement, distinct_ports
from trainop_core.backends.ray.replica import remote_class
from trainop_core.planner.types import ObservedPod

SLICE_SECONDS = 0.2  # how often a wait looks at the interruption flag
CLOSE_TIMEOUT_SECONDS = 60.0


class PlacementTimeout(Exception):
    """The placement group or a replica's actor could not be placed in time."""


class PlacementInterrupted(Exception):
    """A user request (stop, delete, suspend) arrived while the job waited to be placed."""


@dataclass
class Slot:
    """One replica's place: its bundle, its actor and address, the pod it runs (if any)."""

    replica: str  # "worker-1"
    replica_type: str  # canonical, "Worker"
    bundle: int
    actor: Any = None
    ip: str = ""
    port: int = 0
    node_id: str = ""
    pod: ObservedPod | None = None  # the planned pod running here, as last reported
    running: bool = False  # its process runs or will restart in place
    version: int = -1  # the actor's report version last seen
    since: int = 0  # the first report version of the pod it runs (older reports: an earlier pod)
    offset: int = 0  # bytes of the actor's output file already read
    watch: Any = None  # the outstanding `watch` call
    history: list[str] = field(default_factory=list)  # where it ran before (ip:port)

    @property
    def placed(self) -> bool:
        return self.actor is not None and bool(self.ip)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


class Gang:
    """The placement group and replica actors of the job `key`, placed per `placement`."""

    def __init__(self, key: str, placement: Placement, replica_types: dict[str, str]) -> None:
        self.key = key
        self.placement = placement
        self.pg: PlacementGroup | None = None
        self.slots = {
            replica: Slot(replica, replica_types[replica], index)
            for index, replica in enumerate(placement.replicas)
        }
        self._actor_class = remote_class()

    @property
    def placed(self) -> bool:
        return self.pg is not None and all(slot.placed for slot in self.slots.values())

    def endpoints(self) -> dict[str, tuple[str, int]]:
        return {s.replica: (s.ip, s.port) for s in self.slots.values() if s.placed}

    # --- placing ---------------------------------------------------------------------------------
    def place(self, timeout: float, interrupted: Callable[[], bool]) -> list[str]:
        """Reserve the placement group and start every missing actor, within `timeout` seconds.

        Returns the replicas whose address changed (a re-created actor on another node or port).
        Raises PlacementTimeout or PlacementInterrupted; what was placed so far stays."""
        deadline = time.monotonic() + timeout
        if self.pg is None:
            self.pg = placement_group(
                [dict(b) for b in self.placement.bundles],
                strategy=self.placement.strategy,
                name=f"trainop:{self.key}",
            )
        _wait([self.pg.ready()], deadline, interrupted, "placement group")
        missing = [slot for slot in self.slots.values() if not slot.placed]
        for slot in missing:
            if slot.actor is None:
                slot.actor = self._start_actor(slot)
        return self._locate(missing, deadline, interrupted)

    def _start_actor(self, slot: Slot) -> Any:
        bundle = self.placement.bundles[slot.bundle]
        assert self.pg is not None  # placed before any actor
        strategy = PlacementGroupSchedulingStrategy(
            self.pg, placement_group_bundle_index=slot.bundle
        )
        return self._actor_class.options(
            num_cpus=bundle.get("CPU", 0),
            num_gpus=bundle.get("GPU", 0),
            memory=bundle.get("memory") or None,
            scheduling_strategy=strategy,
        ).remote(self.key, slot.replica, slot.replica_type)

    def _locate(
        self, slots: list[Slot], deadline: float, interrupted: Callable[[], bool]
    ) -> list[str]:
        """Ask each new actor for its address; replicas sharing a node get distinct ports."""
        moved: list[str] = []
        pending = slots
        for _ in range(10):
            calls = [s.actor.endpoint.remote(s.port or None, self._ports_near(s)) for s in pending]
            answers = _wait(calls, deadline, interrupted, "replica actors")
            for slot, answer in zip(pending, answers, strict=True):
                old = slot.address if slot.ip else ""
                slot.ip, slot.port, slot.node_id = answer["ip"], answer["port"], answer["node_id"]
                if old and old != slot.address:
                    slot.history.append(old)
                    moved.append(slot.replica)
            ordered = [(s.replica, s.ip, s.port) for s in self.slots.values() if s.ip]
            clashes = set(distinct_ports(ordered))
            pending = [s for s in self.slots.values() if s.replica in clashes]
            if not pending:
                return moved
        raise PlacementTimeout("replicas on one node kept being offered the same port")

    def _ports_near(self, slot: Slot) -> list[int]:
        """Ports other replicas hold on the node this slot's actor was last on (probe avoids)."""
        return [s.port for s in self.slots.values() if s is not slot and s.ip and s.ip == slot.ip]

    # --- stopping, draining, losing and releasing ------------------------------------------------
    def stop_pods(self, slots: list[Slot]) -> None:
        """Stop the pods of `slots` (all at once, then wait for them); their actors stay."""
        calls = [s.actor.stop.remote() for s in slots if s.actor is not None]
        with contextlib.suppress(Exception):
            ray.wait(calls, num_returns=len(calls), timeout=120)
        for slot in slots:
            slot.pod, slot.running = None, False

    def drain(self, append: Callable[[str, bytes], None]) -> None:
        """Hand `append` what the replicas wrote and was not reported yet (before their actors
        go), a bounded chunk at a time."""
        for slot in self.slots.values():
            slot.watch = None  # its answer, if it comes, would repeat what is read here
            for _ in range(64):
                if slot.actor is None:
                    break
                try:
                    report = ray.get(slot.actor.watch.remote(-2, slot.offset, 0), timeout=10)
                except Exception:
                    break
                append(slot.replica, report["log"])
                slot.offset = report["offset"]
                if not report["log"]:
                    break

    def remove_leftovers(self) -> None:
        """Remove a placement group of this job that a previous process of its supervisor left
        (a restarted supervisor places the job afresh)."""
        for _ in range(10):
            try:
                leftover = ray.util.get_placement_group(f"trainop:{self.key}")
            except ValueError:
                return
            with contextlib.suppress(Exception):
                remove_placement_group(leftover)
                _until_removed(leftover)

    def forget_actor(self, slot: Slot) -> None:
        """The slot's actor died (its node, or itself): a new one is placed on the next `place`."""
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)
        slot.actor, slot.watch, slot.offset, slot.version = None, None, 0, -1
        slot.running = False

    def release(self) -> None:
        """Stop every replica, remove their files and actors, then the placement group."""
        live = [slot for slot in self.slots.values() if slot.actor is not None]
        calls = [slot.actor.close.remote() for slot in live]
        with contextlib.suppress(Exception):
            ray.wait(calls, num_returns=len(calls), timeout=CLOSE_TIMEOUT_SECONDS)
        for slot in live:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
            slot.actor, slot.watch, slot.running = None, None, False
            slot.ip, slot.offset, slot.version = "", 0, -1
        if self.pg is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.pg)
                _until_removed(self.pg)
            self.pg = None


def _until_removed(pg: PlacementGroup, timeout: float = 30.0) -> None:
    """Removing a placement group is asynchronous: wait until Ray says it is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if placement_group_table(pg).get("state") == "REMOVED":
            return
        time.sleep(0.05)


def _wait(
    refs: list[Any], deadline: float, interrupted: Callable[[], bool], what: str
) -> list[Any]:
    """ray.get(refs), in slices so that an interruption is noticed; PlacementTimeout at deadline."""
    pending = list(refs)
    while pending:
        if interrupted():
            raise PlacementInterrupted(what)
        left = deadline - time.monotonic()
        if left <= 0:
            raise PlacementTimeout(what)
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(left, SLICE_SECONDS))
    return list(ray.get(refs))
