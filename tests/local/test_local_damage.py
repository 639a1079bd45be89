"""A job whose stored state is damaged stays that job's problem: the others are listed, it is
marked and can be deleted (and its name reused), its logs can still be read, and a supervisor
that takes over from damaged records re-derives what it can and leaves nothing running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import py, tagged_processes

from trainop_core.backends.local.state import (
    EVENTS_KEEP_BYTES,
    EVENTS_MAX_BYTES,
    MAX_EVENT_MESSAGE,
    JobDir,
)
from trainop_core.cli.main import main
from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.errors import DamagedJobError, TrainopError

pytestmark = pytest.mark.timeout(180)

OK = py("print('done')")
SLEEP = py("import time; print('up', flush=True); time.sleep(60)")


def until(condition: Callable[[], object], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def finished_job(client: TrainingClient, name: str) -> None:
    client.create(make_job("TFJob", name).workers(1, command=OK).build())
    assert is_succeeded(client.wait(name, timeout=60, poll=0.05))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "an empty job.json": lambda d: (d / "job.json").write_text(""),
    "a truncated job.json": lambda d: (d / "job.json").write_text('{"apiVersion": "kub'),
    "binary garbage": lambda d: (d / "job.json").write_bytes(os.urandom(512)),
    "a list instead of a job": lambda d: (d / "job.json").write_text("[1, 2]"),
    "a kind that is not a string": lambda d: (d / "job.json").write_text('{"kind": 5}'),
    "an unknown kind": lambda d: _edit(d, lambda job: job.update(kind="NoSuchJob")),
    "a spec no model accepts": lambda d: _edit(d, lambda job: job.update(spec={"x": 1})),
    "no job.json at all": lambda d: (d / "job.json").unlink(),
    "a job.json nested 100000 deep": lambda d: (d / "job.json").write_text("[" * 100_000),
    "a job.json nested 500 deep": lambda d: _edit(d, lambda job: job.update(x=_nested(500))),
    "a job.json of 64 MiB": lambda d: _huge(d / "job.json", 64 * 2**20),
    "a status that is a number": lambda d: _edit(d, lambda job: job.update(status=5)),
    "conditions that are not a list": lambda d: _edit(
        d, lambda job: job.update(status={"conditions": "Succeeded"})
    ),
    "a condition that is a number": lambda d: _edit(
        d, lambda job: job.update(status={"conditions": [5]})
    ),
}


def _nested(depth: int) -> object:
    node: object = 1
    for _ in range(depth):
        node = [node]
    return node


def _huge(path: Path, size: int) -> None:
    with path.open("r+b") as handle:  # sparse: costs no disk, reads as NUL bytes
        handle.truncate(size)


def _edit(job_dir: Path, change: Callable[[dict[str, object]], None]) -> None:
    data = json.loads((job_dir / "job.json").read_text())
    change(data)
    (job_dir / "job.json").write_text(json.dumps(data))


@pytest.mark.parametrize("damage", list(DAMAGE), ids=lambda d: f"{d} stays with its job")
def test_a_damaged_job_is_listed_marked_deleted_and_its_name_reused(
    client: TrainingClient, home: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_job(client, "sound")
    finished_job(client, "broken")
    DAMAGE[damage](home / "jobs" / "default" / "broken")

    assert main(["get", "-A"]) == 0
    out, err = capsys.readouterr()
    rows = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert "Succeeded" in rows["sound"]
    assert "Damaged" in rows["broken"]
    assert "job default/broken is damaged" in err and "trainop delete broken" in err

    assert main(["logs", "broken"]) == 0  # its logs are still there, with a warning
    out, err = capsys.readouterr()
    assert "worker-0 | done" in out and "is damaged" in err

    with pytest.raises(TrainopError, match="damaged"):
        client.wait("broken", timeout=5)
    assert main(["logs", "-f", "broken"]) == 0  # a follower reads the status: ends at once
    assert "worker-0 | done" in capsys.readouterr().out
    with contextlib.suppress(TrainopError):  # refused as damaged, or finished: never a crash
        client.stop("broken")

    assert main(["delete", "broken"]) == 0
    assert not (home / "jobs" / "default" / "broken").exists()
    finished_job(client, "broken")  # the name is free again


def test_logs_say_what_is_wrong_when_nothing_is_left_to_read(
    client: TrainingClient, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_job(client, "bare")
    job_dir = home / "jobs" / "default" / "bare"
    for path in [job_dir / "job.json", job_dir / "local.json", *job_dir.glob("logs/*")]:
        path.unlink()
    assert main(["logs", "bare"]) == 1
    assert "job default/bare is damaged: local.json cannot be read" in capsys.readouterr().err


def kill_supervision(job_dir: JobDir) -> None:
    """SIGKILL the supervisor and its watcher together (both found by working directory)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(job_dir.path):
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                continue
    until(lambda: not job_dir.supervisor_alive())


def test_recovery_from_a_garbled_pods_file_kills_what_ran_and_reruns_the_job(
    client: TrainingClient, home: Path, tmp_path: Path, tag: str
) -> None:
    marker, child = tmp_path / "first", tmp_path / "child"
    script = py(f"""
        import os, subprocess, sys, time
        if os.path.exists({str(marker)!r}):
            print("second run", flush=True)
            sys.exit(0)
        open({str(marker)!r}, "w").close()
        helper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        open({str(child)!r}, "w").write(str(helper.pid))
        time.sleep(600)
    """)
    client.create(make_job("TFJob", "garbled").workers(1, command=script).build())
    until(child.exists)
    until(lambda: child.read_text().strip() != "")
    helper = int(child.read_text())
    job_dir = JobDir(home / "jobs" / "default" / "garbled")
    kill_supervision(job_dir)
    job_dir.pods_file.write_text("{not json")

    finished = client.wait("garbled", timeout=60, poll=0.05)  # restarts the supervisor

    assert is_succeeded(finished)
    assert not Path(f"/proc/{helper}").exists() or _zombie(helper)
    reasons = [event["reason"] for event in job_dir.read_events()]
    assert "PodRecordDamaged" in reasons


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_job_whose_local_state_is_garbled_is_recorded_failed_not_restarted_forever(
    client: TrainingClient, home: Path
) -> None:
    client.create(make_job("TFJob", "nolocal").workers(1, command=SLEEP).build())
    job_dir = JobDir(home / "jobs" / "default" / "nolocal")
    until(lambda: job_dir.read_supervisor_pid() is not None)
    kill_supervision(job_dir)
    job_dir.local_file.write_text("garbage")

    finished = client.wait("nolocal", timeout=30, poll=0.05)

    assert job_state(finished) == "Failed"
    assert "local.json" in (finished.status.conditions[-1].message or "")


@pytest.mark.parametrize(
    "garbage",
    [lambda p: p.write_text("\x00garbage"), lambda p: _huge(p, 2**30)],
    ids=["NUL and letters", "a 1 GiB file"],
)
def test_delete_works_when_the_supervisor_pid_file_is_garbled(
    client: TrainingClient, home: Path, tag: str, garbage: Callable[[Path], None]
) -> None:
    client.create(make_job("TFJob", "nopid").workers(2, command=SLEEP).build())
    job_dir = JobDir(home / "jobs" / "default" / "nopid")
    until(lambda: len(tagged_processes(tag)) == 2)
    garbage(job_dir.supervisor_pid)

    started = time.monotonic()
    client.delete("nopid")

    assert time.monotonic() - started < 30
    assert not job_dir.path.exists()
    until(lambda: tagged_processes(tag) == [], timeout=5)


def test_garbled_event_lines_are_skipped(client: TrainingClient, home: Path) -> None:
    finished_job(client, "events")
    job_dir = JobDir(home / "jobs" / "default" / "events")
    with job_dir.events_file.open("a") as handle:
        handle.write("{garbled\n[1]\n")
    assert all(isinstance(event, dict) for event in job_dir.read_events())


def test_a_replica_name_from_a_tampered_local_file_never_becomes_a_path(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.log"
    secret.write_text("outside TRAINOP_HOME\n")
    finished_job(client, "tampered")
    job_dir = home / "jobs" / "default" / "tampered"
    escape = os.path.relpath(secret.with_suffix(""), job_dir / "logs")
    local = json.loads((job_dir / "local.json").read_text())
    local["ports"][escape] = 12345
    (job_dir / "local.json").write_text(json.dumps(local))

    texts = [line.text for line in client.logs("tampered")]

    assert "outside TRAINOP_HOME" not in texts


def test_the_events_file_keeps_the_newest_events_within_its_cap(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "job")
    job_dir.path.mkdir()
    message = "x" * 1000
    count = 3 * EVENTS_MAX_BYTES // len(message)
    for number in range(count):
        job_dir.append_event("Normal", f"Event{number}", message)
        assert job_dir.events_file.stat().st_size <= EVENTS_MAX_BYTES + 2 * len(message)

    reasons = [event["reason"] for event in job_dir.read_events()]
    assert reasons[-1] == f"Event{count - 1}"  # the newest is kept, in order
    assert reasons == [f"Event{n}" for n in range(count - len(reasons), count)]
    assert len(reasons) * len(message) >= EVENTS_KEEP_BYTES // 2  # trimmed, not emptied


def test_an_event_message_is_cut_to_its_cap(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "job")
    job_dir.path.mkdir()
    job_dir.append_event("Warning", "Huge", "y" * (10 * MAX_EVENT_MESSAGE))
    [event] = job_dir.read_events()
    assert event["message"] == "y" * MAX_EVENT_MESSAGE + " [cut]"


def test_a_huge_events_file_is_read_from_its_tail_in_bounded_memory(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "job")
    job_dir.path.mkdir()
    job_dir.events_file.touch()
    _huge(job_dir.events_file, 256 * 2**20)
    job_dir.append_event("Normal", "Newest", "read")

    tracemalloc.start()
    try:
        events = job_dir.read_events()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert [event["reason"] for event in events] == ["Newest"]
    assert peak < 4 * EVENTS_MAX_BYTES, f"{peak / 2**20:.0f} MiB to read the events"


def test_event_lines_of_any_shape_are_skipped_not_fatal(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "job")
    job_dir.path.mkdir()
    job_dir.append_event("Normal", "First", "ok")
    with job_dir.events_file.open("ab") as handle:
        handle.write(b"[" * 100_000 + b"\n")  # deeper than the JSON decoder recurses
        handle.write(os.urandom(2000).replace(b"\n", b"") + b"\n")
        handle.write(b'{"reason": ["not", "a", "string"], "message": {"x": 1}}\n')
    job_dir.append_event("Normal", "Last", "ok")

    events = job_dir.read_events()

    assert [event.get("reason") for event in events] == ["First", None, "Last"]
    assert all(isinstance(value, str) for event in events for value in event.values())


def test_an_events_file_that_cannot_be_read_is_damage_named(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "jobs" / "default" / "job")
    job_dir.events_file.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(DamagedJobError, match=r"events\.jsonl cannot be read"):
        job_dir.read_events()


def test_state_files_are_never_written_through_a_planted_link(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    finished_job(client, "linked")
    job_dir = JobDir(home / "jobs" / "default" / "linked")
    theirs, their_job = tmp_path / "theirs", tmp_path / "their-job.json"
    theirs.write_text("untouched")
    their_job.write_text(job_dir.job_file.read_text())
    for path, target in ((job_dir.events_file, theirs), (job_dir.job_file, their_job)):
        path.unlink()
        path.symlink_to(target)
    unchanged = their_job.read_text()

    with pytest.raises(OSError, match="is a symbolic link"):
        job_dir.append_event("Normal", "Planted", "must not reach the target")
    # A job file that is a link is damage: reported (and never read or written through), the
    # target untouched; `trainop delete` removes it.
    with pytest.raises(DamagedJobError, match="is a symbolic link"):
        job_dir.modify_job(lambda job: job.update(status={}))

    assert theirs.read_text() == "untouched" and their_job.read_text() == unchanged


@pytest.mark.parametrize(
    "local",
    ['{"ports": [1, 2]}', '{"workdir": ".", "ports": {"worker-0": "http"}}', "[" * 100_000],
    ids=["ports that are a list", "a port that is a word", "nesting 100000 deep"],
)
def test_a_job_whose_local_file_is_damaged_does_not_block_new_jobs(
    client: TrainingClient, home: Path, local: str
) -> None:
    finished_job(client, "odd")
    (home / "jobs" / "default" / "odd" / "local.json").write_text(local)
    finished_job(client, "next")  # allocating its ports reads every job's local.json
