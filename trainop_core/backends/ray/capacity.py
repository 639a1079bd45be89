"""What a job's supervisor costs the head node, and a clear refusal when the head is full.

Every supervisor runs on the head node (it must outlive the worker nodes). Each reserves
`SUPERVISOR_MEMORY_BYTES` of the head's Ray `memory` resource, which covers its process and the
most it keeps (`logbuffer.JOB_LIMIT_BYTES` of output, `journal.MAX_EVENTS` events), so Ray
itself never places more supervisors than the head's memory resource holds (by default Ray
gives a node about 70% of its memory; `ray start --head --memory=BYTES` sets it). A job that
would not fit is refused at submit, naming the limit, instead of waiting for a place.

The place is reserved all at once, before the supervisor starts: a one-bundle placement group on
the head (`reserve_head_slot`, detached, named after the job), the supervisor then runs in it,
and the group goes with the job (`release_head_slot`). Two drivers submitting the last place at
once both pass the check above; the group of the one that loses stays pending while the head
has no room, which is seen within two seconds (a pending group holds nothing, so its wait is not
a slow start): it is refused then, the same way, instead of waiting out the start timeout.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from trainop_core.errors import TrainopError

SUPERVISOR_MEMORY_BYTES = 256 * 1024 * 1024  # measured: ~180 MiB RSS holding 8 MiB of output
HEAD_RESOURCE = "node:__internal_head__"
SLOT_PREFIX = "trainop-supervisor:"  # + namespace/name: the placement group of a job's supervisor
SLOT_CHECK_SECONDS = 1.0  # how often a pending reservation looks whether the head is full
FULL_LOOKS = 2  # looks in a row that see it waiting on a full head before it is refused


class ClusterFull(TrainopError):
    """The head node has no room for another job's supervisor (retry once jobs are deleted)."""


def supervisor_options(slot: Any) -> dict[str, Any]:
    """Ray actor options that run a supervisor in its reserved place on the head node (`slot`,
    from `reserve_head_slot`); what it starts is not placed there."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "num_cpus": 0,
        "memory": SUPERVISOR_MEMORY_BYTES,
        "resources": {HEAD_RESOURCE: 0.001},
        "scheduling_strategy": PlacementGroupSchedulingStrategy(slot, 0, False),
    }


def slot_name(key: str) -> str:
    return f"{SLOT_PREFIX}{key}"


def reserve_head_slot(key: str, timeout: float, jobs_there: int) -> Any:
    """The placement group holding the place of job `key`'s supervisor on the head node, once
    Ray has reserved it. ClusterFull, with nothing left reserved, as soon as the group waits
    while the head has no room (another driver's job took the last place meanwhile), or after
    `timeout` seconds. Event-driven: returns the moment Ray reserves it. Does I/O (GCS)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {"memory": SUPERVISOR_MEMORY_BYTES, HEAD_RESOURCE: 0.001}
    group = placement_group(
        [bundle], strategy="STRICT_PACK", name=slot_name(key), lifetime="detached"
    )
    try:
        _until_reserved(group, timeout)
    except BaseException as exc:  # refused, or the caller interrupted: nothing stays reserved
        remove_placement_group(group)
        if isinstance(exc, _Unreserved):
            raise _full(exc.free, _head_total(), jobs_there, exc.why) from None
        raise
    return group


class _Unreserved(Exception):
    def __init__(self, free: float, why: str) -> None:
        super().__init__(why)
        self.free, self.why = free, why


def _until_reserved(group: Any, timeout: float) -> None:
    ready, deadline = group.ready(), time.monotonic() + timeout
    seen_full = 0
    while not ray.wait([ready], timeout=SLOT_CHECK_SECONDS)[0]:
        free = _pending_without_room(group)
        # Ray's view of a node's free resources lags by a report period: a head seen full
        # once may have just freed a place, so only two looks in a row refuse.
        seen_full = seen_full + 1 if free is not None else 0
        if free is not None and seen_full >= FULL_LOOKS:
            raise _Unreserved(free, "its last place was taken meanwhile by another job")
        if time.monotonic() > deadline:
            raise _Unreserved(0.0, f"no place came free within {timeout:g} s")


def _head_total() -> float:
    head = _head_node()
    return float(head["Resources"].get("memory", 0)) if head is not None else 0.0


def release_head_slot(key: str) -> None:
    """Give back the place of job `key`'s supervisor (removing the group stops an actor still
    in it); nothing if it has none. Any driver may: found by name among every group."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import (
        PlacementGroup,
        placement_group_table,
        remove_placement_group,
    )

    for group_id, info in placement_group_table().items():
        if info.get("name") == slot_name(key) and info.get("state") != "REMOVED":
            remove_placement_group(PlacementGroup(PlacementGroupID.from_hex(group_id)))


def _pending_without_room(group: Any) -> float | None:
    """The head's free memory resource if `group` still waits (holding nothing) and the head
    cannot hold a supervisor; None otherwise (reserved meanwhile, room there, or no head in
    view: a Ray Client session)."""
    from ray.util.placement_group import placement_group_table

    if placement_group_table(group).get("state") != "PENDING":
        return None
    head = _head_node()
    free = _free_memory(head["NodeID"]) if head is not None else None
    return free if free is not None and free < SUPERVISOR_MEMORY_BYTES else None


def check_head_room(jobs_there: int) -> None:
    """Raise ClusterFull if the head node's free memory resource cannot hold one more
    supervisor (`jobs_there`: how many trainop jobs it holds, for the message). Does I/O (GCS)."""
    head = _head_node()
    if head is None:
        return  # no head in view (a Ray Client session): Ray's own scheduling still bounds it
    total = float(head["Resources"].get("memory", 0))
    free = _free_memory(head["NodeID"])
    if free is None or free >= SUPERVISOR_MEMORY_BYTES:
        return
    raise _full(free, total, jobs_there)


def _full(free: float, total: float, jobs_there: int, why: str = "") -> ClusterFull:
    return ClusterFull(
        f"the Ray head node has no room for another job{': ' + why if why else ''}: each job's "
        f"supervisor reserves {_mib(SUPERVISOR_MEMORY_BYTES)} of its memory resource and "
        f"{_mib(free)} of {_mib(total)} is free ({jobs_there} trainop job(s) there). Nothing was "
        "created. Delete finished jobs (trainop get -A --backend ray; trainop delete NAME "
        "--backend ray), or give the head more (ray start --head --memory=BYTES)."
    )


def _head_node() -> dict[str, Any] | None:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    return next((n for n in alive if HEAD_RESOURCE in n.get("Resources", {})), None)


def _free_memory(node_id: str) -> float | None:
    from ray._private.state import available_resources_per_node

    with_free = available_resources_per_node()
    if node_id not in with_free:
        return None
    return float(with_free[node_id].get("memory", 0))


def _mib(n: float) -> str:
    return f"{n / 1024**2:,.0f} MiB"
