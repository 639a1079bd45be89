"""The local queue with real processes: jobs carrying Kueue's queue label wait for quota.

Every replica records when it started and ended (files named by job, pid and time), so what ran
at once is read from the jobs' own records, not from trainop's state.
"""

from __future__ import annotations

import os
import signal
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from local_helpers import py

from trainop_core.backends.local.queue import change_config, lock_file
from trainop_core.backends.local.queueing import PRIORITY_FIELD, QUEUE_FIELD, QUEUE_LABEL, Resources
from trainop_core.backends.local.state import JobDir, StateRoot, flocked
from trainop_core.backends.local.watcher import MAX_RESTARTS
from trainop_core.cli._output import state_label
from trainop_core.client import TrainingClient, is_succeeded, job_state, queue_message
from trainop_core.errors import InvalidJobError
from trainop_core.testing.builders import wait_for

TIMEOUT = 180.0  # a shared 2-core machine; every wait ends at an event long before


def queued_job(
    name: str, records: Path, *, cpu: str = "1", hold: Path | None = None, seconds: float = 0.2
) -> Any:
    """A one-replica job in queue "q" requesting `cpu`, whose replica records its start and end
    (and, with `hold`, waits for that file to exist before it ends)."""
    script = py(f"""
        import os, time
        def mark(what):
            stamp = f"{name}.{{os.getpid()}}.{{what}}.{{time.time_ns()}}"
            path = os.path.join({str(records)!r}, stamp)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        mark("start")
        hold = {str(hold) if hold else ""!r}
        while hold and not os.path.exists(hold):
            time.sleep(0.02)
        time.sleep({seconds})
        mark("end")
    """)
    return (
        make_job("PyTorchJob", name)
        .labels(**{QUEUE_LABEL: "q"})
        .master(restart_policy="OnFailure", command=script)
        .container("Master", resources={"requests": {"cpu": cpu}})
    )


def runs(records: Path) -> dict[str, list[tuple[int, int | None]]]:
    """Per job, its replica runs as (start, end) in ns; end None for a run that was killed."""
    marks: dict[tuple[str, str], dict[str, int]] = {}
    for path in records.iterdir():
        name, pid, what, when = path.name.split(".")
        marks.setdefault((name, pid), {})[what] = int(when)
    found: dict[str, list[tuple[int, int | None]]] = {}
    for (name, _), mark in marks.items():
        found.setdefault(name, []).append((mark["start"], mark.get("end")))
    return {name: sorted(spans) for name, spans in found.items()}


def most_at_once(records: Path) -> int:
    """The most replicas that ran at the same time; a killed run is taken to last until its
    job's next run started (an upper bound: its job kept its quota in between)."""
    edges = []
    for spans in runs(records).values():
        for i, (start, end) in enumerate(spans):
            if end is None:
                assert i + 1 < len(spans), "a killed run that was never run again"
                end = spans[i + 1][0]
            edges += [(start, 1), (end, -1)]
    running = most = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):  # ends before starts
        running += step
        most = max(most, running)
    return most


def set_quota(home: Path, cpu: str, memory: str = "64Gi") -> None:
    quota = Resources(Decimal(cpu), Decimal(int(memory[:-2]) * 2**30))
    change_config(StateRoot(home), lambda config: config.quotas.update(q=quota))


def state(client: TrainingClient, name: str) -> str:
    return job_state(client.get(name))


def all_succeeded(client: TrainingClient, names: list[str]) -> bool:
    return all(state(client, name) == "Succeeded" for name in names)


def in_state(client: TrainingClient, home: Path, names: list[str], wanted: str) -> list[str]:
    """The jobs in state `wanted` whose supervisor still runs."""
    alive = [n for n in names if JobDir(home / "jobs" / "default" / n).supervisor_alive()]
    return [name for name in alive if state(client, name) == wanted]


def restarted(home: Path, names: list[str]) -> set[str]:
    """The jobs whose watcher replaced a killed supervisor (it records an event saying so)."""
    events = {n: JobDir(home / "jobs" / "default" / n).read_events() for n in names}
    return {n for n in names if any(e["reason"] == "SupervisorRestarted" for e in events[n])}


def kill_one(
    client: TrainingClient, home: Path, names: list[str], wanted: str, *, last: bool = False
) -> list[str] | None:
    """SIGKILL the supervisor of one job in state `wanted` (the first, or the last); the jobs
    seen in that state, or None if none could be killed. A finished job's supervisor seen alive
    may have done its step before the lock was taken and be gone by the kill: then look again
    (one that finishes while the lock is held stays alive, blocked in its step)."""
    found = in_state(client, home, names, wanted)
    if not found:
        return None
    try:
        os.kill(supervisor_pid(home, found[-1] if last else found[0]), signal.SIGKILL)
    except ProcessLookupError:
        return None
    return found


def supervisor_pid(home: Path, name: str) -> int:
    pid = JobDir(home / "jobs" / "default" / name).read_supervisor_pid()
    assert pid is not None
    return pid


def test_twenty_jobs_never_exceed_two_cpus_and_all_succeed_through_supervisor_crashes(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records, release = tmp_path / "records", tmp_path / "release"
    records.mkdir()
    set_quota(home, "2")
    names = [f"job{i:02}" for i in range(20)]
    for name in names:
        hold = release if name == "job03" else None  # runs until we have killed its supervisor
        client.create(queued_job(name, records, hold=hold).build())

    # 1. The supervisor of a running job is killed: its watcher restarts it, which re-runs the
    #    replica (OnFailure); the job keeps its quota throughout.
    wait_for(lambda: "job03" in runs(records), TIMEOUT)
    os.kill(supervisor_pid(home, "job03"), signal.SIGKILL)
    wait_for(lambda: len(runs(records)["job03"]) == 2, TIMEOUT)
    release.touch()

    # 2. Admission steps are killed midway: with the queue's lock held here, a job that has
    #    just finished blocks in the step that would admit the next one; it and a waiting job's
    #    supervisor (blocked in its own step) are killed before the lock is given back.
    with flocked(lock_file(StateRoot(home))):
        wait_for(lambda: kill_one(client, home, names, "Succeeded"), TIMEOUT)
        waiting = wait_for(lambda: kill_one(client, home, names, "Queued", last=True), TIMEOUT)

    wait_for(lambda: all_succeeded(client, names), TIMEOUT, interval=0.1)
    assert most_at_once(records) == 2
    started = {name: len(spans) for name, spans in runs(records).items()}
    assert started == {name: 2 if name == "job03" else 1 for name in names}
    # Only the supervisors killed here were replaced (an admission's SIGUSR1 that reaches a
    # supervisor still starting must not kill it), and the finished job's was not.
    assert restarted(home, names) == {"job03", waiting[-1]}


def test_higher_priority_runs_first_then_first_come_first_served(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records, release = tmp_path / "records", tmp_path / "release"
    records.mkdir()
    set_quota(home, "1")
    change_config(StateRoot(home), lambda c: c.priority_classes.update(high=100, mid=10))
    client.create(queued_job("blocker", records, hold=release).build())
    wait_for(lambda: "blocker" in runs(records), TIMEOUT)
    order = [("low1", None), ("high", "high"), ("low2", None), ("mid", "mid")]
    for name, priority in order:
        job = queued_job(name, records)
        if priority:
            job.run_policy(schedulingPolicy={"priorityClass": priority})
        client.create(job.build())
    wait_for(lambda: all(state(client, name) == "Queued" for name, _ in order), TIMEOUT)
    release.touch()
    wait_for(lambda: all_succeeded(client, [name for name, _ in order]), TIMEOUT, interval=0.1)
    by_start = sorted(runs(records), key=lambda name: runs(records)[name][0][0])
    assert by_start == ["blocker", "high", "mid", "low1", "low2"]


def test_a_queued_job_can_be_deleted_and_never_runs(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records, release = tmp_path / "records", tmp_path / "release"
    records.mkdir()
    set_quota(home, "1")
    client.create(queued_job("blocker", records, hold=release).build())
    client.create(queued_job("doomed", records).build())
    client.create(queued_job("next", records).build())
    wait_for(lambda: state(client, "doomed") == "Queued", TIMEOUT)
    client.delete("doomed")
    assert [job.name for job in client.list()] == ["blocker", "next"]
    release.touch()
    wait_for(lambda: all_succeeded(client, ["blocker", "next"]), TIMEOUT, interval=0.1)
    assert sorted(runs(records)) == ["blocker", "next"]


def test_a_job_bigger_than_the_quota_stays_queued_saying_it_can_never_fit(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    set_quota(home, "2")
    client.create(queued_job("huge", records, cpu="3").build())
    client.create(queued_job("small", records).build())
    wait_for(lambda: state(client, "small") == "Succeeded", TIMEOUT, interval=0.1)
    huge = client.get("huge")
    assert job_state(huge) == "Queued"
    assert queue_message(huge) == (
        "can never be admitted: it requests 3 cpu and queue 'q' has a quota of 2 "
        "(`trainop queue set q --cpu ...` raises it)"
    )
    assert "huge" not in runs(records)


def test_a_job_waiting_for_quota_says_which_resource_is_short(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records, release = tmp_path / "records", tmp_path / "release"
    records.mkdir()
    set_quota(home, "2")
    client.create(queued_job("first", records, cpu="1500m", hold=release).build())
    client.create(queued_job("second", records).build())
    wait_for(lambda: state(client, "second") == "Queued", TIMEOUT)
    assert queue_message(client.get("second")) == (
        "insufficient unused quota in queue 'q' for cpu (cpu: requests 1, 500m of 2 free)"
    )
    release.touch()
    wait_for(lambda: all_succeeded(client, ["first", "second"]), TIMEOUT, interval=0.1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda job: job.labels(**{QUEUE_LABEL: "Not_A_Queue"}), QUEUE_FIELD),
        (lambda job: job.run_policy(schedulingPolicy={"priorityClass": "urgent"}), PRIORITY_FIELD),
    ],
    ids=["a bad queue name", "an unknown priority class"],
)
def test_a_job_the_queue_cannot_take_is_refused_and_nothing_is_created(
    client: TrainingClient, home: Path, tmp_path: Path, change: Any, field: str
) -> None:
    job = change(queued_job("refused", tmp_path))
    with pytest.raises(InvalidJobError) as err:
        client.create(job.build())
    assert err.value.problems[0].path == field
    assert client.list() == []


def test_a_wake_up_that_reaches_a_supervisor_still_starting_does_not_kill_it(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    """An admission step signals (SIGUSR1) supervisors it admits, which may still be starting."""
    records = tmp_path / "records"
    records.mkdir()
    job_dir = JobDir(home / "jobs" / "default" / "early")
    client.create(queued_job("early", records).build())
    pid = wait_for(job_dir.read_supervisor_pid, TIMEOUT, interval=0)  # as soon as there is one
    os.kill(pid, signal.SIGUSR1)
    wait_for(lambda: state(client, "early") == "Succeeded", TIMEOUT, interval=0.1)
    assert restarted(home, ["early"]) == set()


def test_a_supervisor_killed_again_and_again_is_replaced_five_times_then_left_lost(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    records, release = tmp_path / "records", tmp_path / "release"
    records.mkdir()
    set_quota(home, "1")
    client.create(queued_job("blocker", records, hold=release).build())
    client.create(queued_job("victim", records).build())
    victim = JobDir(home / "jobs" / "default" / "victim")
    killed: list[int] = []

    def new_supervisor() -> int | None:
        pid = victim.read_supervisor_pid()
        return pid if victim.supervisor_alive() and pid not in killed else None

    for _ in range(MAX_RESTARTS + 1):
        pid = wait_for(new_supervisor, TIMEOUT)
        assert pid is not None
        killed.append(pid)
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: state_label(client.get("victim")) == "Queued (supervisor lost)", TIMEOUT)
    assert restarted(home, ["victim"]) == {"victim"}
    assert sum(e["reason"] == "SupervisorRestarted" for e in victim.read_events()) == MAX_RESTARTS
    release.touch()
    assert is_succeeded(client.wait("victim", timeout=TIMEOUT))  # a client recovers it
