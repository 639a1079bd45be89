"""The Ray backend's memory is bounded: each supervisor reserves its memory on the head node (a
job the head cannot hold is refused at submit, naming the limit), and a chatty replica's output
grows nothing on its node (it goes through a pipe into a bounded buffer)."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from builders import make_job
from ray_helpers import leftovers, py, tagged, until

from trainop_core.backends.ray.backend import START_TIMEOUT_SECONDS
from trainop_core.backends.ray.capacity import (
    SUPERVISOR_MEMORY_BYTES,
    ClusterFull,
    release_head_slot,
    reserve_head_slot,
)
from trainop_core.client import TrainingClient, is_succeeded

HEAD = "node:__internal_head__"
MIB = 1024**2


def _head_free_memory() -> float:
    from ray._private.state import available_resources_per_node

    [head] = [n for n in ray.nodes() if n["Alive"] and HEAD in n["Resources"]]
    return float(available_resources_per_node()[head["NodeID"]].get("memory", 0))


@ray.remote(num_cpus=0)
class _Placeholder:
    def ready(self) -> bool:
        return True


def _head_total_memory() -> float:
    [head] = [n for n in ray.nodes() if n["Alive"] and HEAD in n["Resources"]]
    return float(head["Resources"].get("memory", 0))


def test_each_supervisor_reserves_its_memory_on_the_head_node(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    """Measured from a head with nothing reserved: earlier tests' supervisors, given back a
    report period after their jobs were deleted, would otherwise move the figure meanwhile."""
    gate = tmp_path / "gate"
    wait = py(f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.1)")
    until(lambda: _head_free_memory() == _head_total_memory(), what="nothing reserved on the head")
    before = _head_free_memory()
    client.create(tagged(make_job("TFJob", "reserving").workers(1, command=wait), tag))
    # Ray's view of the node's resources lags the actor's placement by a report period.
    reserved = SUPERVISOR_MEMORY_BYTES
    until(lambda: before - _head_free_memory() == pytest.approx(reserved, abs=MIB), what="reserved")
    gate.touch()
    assert is_succeeded(client.wait("reserving", timeout=120))
    client.delete("reserving")
    until(lambda: _head_free_memory() == pytest.approx(before, abs=MIB), what="given back")


def test_a_job_the_head_node_cannot_hold_is_refused_at_submit_naming_the_limit(
    client: TrainingClient, tag: str
) -> None:
    """The head's memory resource is nearly all taken (here by a placeholder actor, as by many
    jobs' supervisors): a new job is refused at once, nothing of it created; once there is room
    again, the same job is accepted."""
    room = int(_head_free_memory() - SUPERVISOR_MEMORY_BYTES / 2)
    hog = _Placeholder.options(memory=room, resources={HEAD: 0.001}).remote()
    ray.get(hog.ready.remote(), timeout=60)
    job = tagged(make_job("TFJob", "no-room").workers(1, command=py("print('ran')")), tag)
    try:
        with pytest.raises(ClusterFull) as refused:
            client.create(job)
        message = str(refused.value)
        assert "the Ray head node has no room for another job" in message
        assert f"each job's supervisor reserves {SUPERVISOR_MEMORY_BYTES // MIB} MiB" in message
        assert "ray start --head --memory=BYTES" in message and "Nothing was created" in message
        assert not leftovers(tag) and client.list(None) == []
    finally:
        ray.kill(hog)
    until(lambda: _head_free_memory() >= SUPERVISOR_MEMORY_BYTES, what="room again")
    assert is_succeeded(client.wait(client.create(job).name, timeout=120))


def _room_for_one_more() -> Any:
    """A placeholder actor holding all but 1.5 supervisors' worth of the head's memory resource
    (as other jobs would): room for exactly one more supervisor."""
    # From a head with nothing reserved and Ray's view of it settled: earlier tests' places,
    # given back a report period after their jobs went, would otherwise skew the figure.
    until(lambda: _head_free_memory() == _head_total_memory(), what="nothing reserved on the head")
    room = int(_head_free_memory() - 1.5 * SUPERVISOR_MEMORY_BYTES)
    hog = _Placeholder.options(memory=room, resources={HEAD: 0.001}).remote()
    ray.get(hog.ready.remote(), timeout=60)
    return hog


# The refusal must be the loser's own, seen at once, never the start timeout's (300 s): a
# bound far below that timeout and far above how long a look at the head takes.
PROMPTLY = START_TIMEOUT_SECONDS / 5


def test_the_driver_that_loses_the_heads_last_place_is_refused_promptly() -> None:
    """The race itself: both drivers passed the check for room; the winner's place is reserved
    first, the loser's reservation then waits while the head is full and is refused with what
    is wrong, holding nothing, instead of waiting out the start timeout."""
    hog = _room_for_one_more()
    try:
        winner = reserve_head_slot("race/winner", START_TIMEOUT_SECONDS, 1)
        started = time.monotonic()
        with pytest.raises(ClusterFull) as refused:
            reserve_head_slot("race/loser", START_TIMEOUT_SECONDS, 1)
        assert time.monotonic() - started < PROMPTLY
        message = str(refused.value)
        assert "its last place was taken meanwhile by another job" in message
        assert "Nothing was created" in message and "ray start --head --memory=BYTES" in message
        assert winner is not None
    finally:
        release_head_slot("race/winner")
        release_head_slot("race/loser")
        ray.kill(hog)
    assert not leftovers("no-tag"), "both places given back"
    until(lambda: _head_free_memory() >= 2 * SUPERVISOR_MEMORY_BYTES, what="room again")


def test_two_drivers_submitting_for_the_last_place_one_runs_the_other_is_refused_promptly(
    client: TrainingClient, tag: str
) -> None:
    """Two submissions at once for the head's last place: exactly one is created; the other is
    refused naming the head's limit, promptly, whether it lost at the check or at the place."""
    hog = _room_for_one_more()
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}
    took: dict[str, float] = {}

    def submit(name: str) -> None:
        job = tagged(make_job("TFJob", name).workers(1, command=py("print('ran')")), tag)
        barrier.wait()
        started = time.monotonic()
        try:
            outcomes[name] = client.create(job)
        except ClusterFull as exc:
            outcomes[name] = exc
        took[name] = time.monotonic() - started

    threads = [threading.Thread(target=submit, args=(n,)) for n in ("first", "second")]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        refused = [n for n, o in outcomes.items() if isinstance(o, ClusterFull)]
        assert len(outcomes) == 2 and len(refused) == 1, outcomes
        assert "the Ray head node has no room for another job" in str(outcomes[refused[0]])
        assert took[refused[0]] < PROMPTLY, took
        [created] = [n for n in outcomes if n not in refused]
        assert is_succeeded(client.wait(created, timeout=120))
        assert [j.name for j in client.list(None)] == [created]  # nothing of the loser
    finally:
        ray.kill(hog)
    until(lambda: _head_free_memory() >= 2 * SUPERVISOR_MEMORY_BYTES, what="room again")


def _stdout_of(pid: int) -> os.stat_result:
    return os.stat(f"/proc/{pid}/fd/1")


def test_a_chatty_replica_grows_nothing_on_its_node(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    """24 MiB of output, then the replica waits: where its output goes holds none of it (a pipe,
    not a growing file), and the supervisor keeps the newest 8 MiB, saying what it dropped."""
    gate = tmp_path / "gate"
    chatty = py(f"""
        import os, sys, time
        line = "x" * 1023 + "\\n"
        for _ in range(24 * 1024):
            sys.stdout.write(line)
        sys.stdout.write("last line\\n")
        sys.stdout.flush()
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.1)
    """)
    client.create(tagged(make_job("TFJob", "chatty").workers(1, command=chatty), tag))
    [pid] = until(lambda: leftovers(tag).get("processes"), what="the replica running")

    def all_read() -> bool:
        return any(line.text == "last line" for line in client.logs("chatty"))

    until(all_read, timeout=120, what="its output read to the end")
    out = _stdout_of(pid)
    assert stat.S_ISFIFO(out.st_mode) or out.st_size < MIB, "output is kept on the node's disk"
    gate.touch()
    assert is_succeeded(client.wait("chatty", timeout=120))
    text = [line.text for line in client.logs("chatty")]
    assert any("bytes of older output dropped" in line for line in text)
    assert sum(len(line) + 1 for line in text) <= 8 * MIB + 4096
