"""What a job's supervisor costs the head node, and a clear refusal when the head is full.

Every supervisor runs on the head node (it must outlive the worker nodes). Each reserves
`SUPERVISOR_MEMORY_BYTES` of the head's Ray `memory` resource, which covers its process and the
most it keeps (`logbuffer.JOB_LIMIT_BYTES` of output, `journal.MAX_EVENTS` events), so Ray
itself never places more supervisors than the head's memory resource holds (by default Ray
gives a node about 70% of its memory; `ray start --head --memory=BYTES` sets it). A job that
would not fit is refused at submit, naming the limit, instead of waiting for a place. Two drivers
submitting the last place at once both pass that check; the one Ray cannot place waits for its
supervisor's start timeout and is then refused the same way.
"""

from __future__ import annotations

from typing import Any

import ray

from trainop_core.errors import TrainopError

SUPERVISOR_MEMORY_BYTES = 256 * 1024 * 1024  # measured: ~180 MiB RSS holding 8 MiB of output
HEAD_RESOURCE = "node:__internal_head__"


class ClusterFull(TrainopError):
    """The head node has no room for another job's supervisor (retry once jobs are deleted)."""


def supervisor_options() -> dict[str, Any]:
    """Ray actor options that pin a supervisor to the head node with its memory reserved."""
    return {
        "num_cpus": 0,
        "memory": SUPERVISOR_MEMORY_BYTES,
        "resources": {HEAD_RESOURCE: 0.001},
    }


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
    raise ClusterFull(
        f"the Ray head node has no room for another job: each job's supervisor reserves "
        f"{_mib(SUPERVISOR_MEMORY_BYTES)} of its memory resource and {_mib(free)} of "
        f"{_mib(total)} is free ({jobs_there} trainop job(s) there). Nothing was created. "
        "Delete finished jobs (trainop get -A --backend ray; trainop delete NAME --backend ray), "
        "or give the head more (ray start --head --memory=BYTES)."
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
