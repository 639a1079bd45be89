"""Every descendant of every replica dies with its job, whatever happens to the supervisor:
including processes that double-forked and called setsid() (they leave the replica's process
group and session), and ones that even replaced their environment."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import py, tagged_processes

from trainop_core.backends.local.state import JobDir
from trainop_core.client import TrainingClient, is_succeeded

pytestmark = pytest.mark.timeout(180)


def daemon_then(pids: Path, after: str, *, clean_env: bool = False) -> list[str]:
    """A replica that double-forks a setsid() daemon (its pid goes into `pids`), then runs
    `after`. With `clean_env` the daemon exec's `sleep` with an empty environment."""
    body = (
        "os.execve('/bin/sleep', ['sleep', '600'], {})"
        if clean_env
        else "time.sleep(600)"
    )  # fmt: skip
    return py(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open({str(pids)!r}, "a") as out:
                    out.write(f"{{os.getpid()}}\\n")
                {body}
            os._exit(0)
        os.wait()
        while not os.path.exists({str(pids)!r}):
            time.sleep(0.01)
        print("daemon started", flush=True)
        {after}
    """)


def stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state, ppid, ...); None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    fields = stat(pid)
    return fields is not None and fields[0] != "Z"


def until(condition: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def daemons(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "daemons"
    yield path
    for pid in daemons(path):  # never leave one behind, even when a test fails
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def supervisor_and_watcher(job_dir: JobDir) -> tuple[int, int]:
    until(lambda: job_dir.read_supervisor_pid() is not None)
    supervisor = job_dir.read_supervisor_pid()
    assert supervisor is not None
    fields = stat(supervisor)
    assert fields is not None
    watcher = int(fields[1])
    # Never signal a process that is not this job's (on a build without a watcher, the parent
    # is init): the watcher runs in the job's directory, like the supervisor.
    assert os.readlink(f"/proc/{watcher}/cwd") == str(job_dir.path), "no watcher runs this job"
    return supervisor, watcher


def start(client: TrainingClient, home: Path, pids: Path, name: str, **kw: bool) -> JobDir:
    sleeper = daemon_then(pids, "time.sleep(600)", **kw)
    client.create(make_job("TFJob", name).workers(2, command=sleeper).build())
    until(lambda: len(daemons(pids)) == 2)
    return JobDir(home / "jobs" / "default" / name)


@pytest.mark.parametrize(
    "clean_env", [False, True], ids=["marked daemons", "daemons that cleared their environment"]
)
def test_a_sigkilled_supervisor_takes_double_forked_daemons_with_it(
    client: TrainingClient, home: Path, pids: Path, tag: str, clean_env: bool
) -> None:
    job_dir = start(client, home, pids, "orphans", clean_env=clean_env)
    supervisor = job_dir.read_supervisor_pid()
    assert supervisor is not None and all(alive(pid) for pid in daemons(pids))

    os.kill(supervisor, signal.SIGKILL)

    until(lambda: not any(alive(pid) for pid in daemons(pids)))
    until(lambda: tagged_processes(tag) == [])


def test_daemons_die_even_when_the_watcher_dies_with_the_supervisor(
    client: TrainingClient, home: Path, pids: Path, tag: str
) -> None:
    """Both killed at once (an OOM kill of the session): the next client call that restarts the
    supervisor finds the daemons by their job's marker."""
    job_dir = start(client, home, pids, "both")
    supervisor, watcher = supervisor_and_watcher(job_dir)
    os.kill(watcher, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)
    until(lambda: not job_dir.supervisor_alive())
    assert any(alive(pid) for pid in daemons(pids))  # adopted by init, for now

    client.stop("both")

    until(lambda: not any(alive(pid) for pid in daemons(pids)))


def test_a_replica_that_exits_takes_its_daemon_with_it(
    client: TrainingClient, home: Path, pids: Path
) -> None:
    """Like a container runtime: when the main process ends, whatever it left goes too."""
    job = make_job("TFJob", "leaves").workers(1, command=daemon_then(pids, "sys.exit(0)"))
    client.create(job.build())
    assert is_succeeded(client.wait("leaves", timeout=60, poll=0.05))
    until(lambda: not any(alive(pid) for pid in daemons(pids)))


def test_delete_takes_every_daemon_with_it(
    client: TrainingClient, home: Path, pids: Path, tag: str
) -> None:
    start(client, home, pids, "deleted")
    client.delete("deleted")
    assert not any(alive(pid) for pid in daemons(pids))  # gone before delete returns
    assert tagged_processes(tag) == []
