"""A supervisor that dies takes its replicas with it; the next one re-runs them, never twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import py, tagged_processes

from trainop_core.backends.local import LocalBackend
from trainop_core.backends.local.state import JobDir
from trainop_core.cli._output import state_label
from trainop_core.client import TrainingClient, is_succeeded, job_state


def test_a_killed_supervisor_is_reported_and_the_job_recovers_without_duplicates(
    client: TrainingClient, home: Path, tag: str, tmp_path: Path
) -> None:
    marker = tmp_path / "first-run-{rank}"
    script = py(f"""
        import os, time
        marker = {str(marker)!r}.format(rank=os.environ["RANK"])
        print("started", flush=True)
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(60)
    """)
    job = make_job("PyTorchJob", "crash").master(command=script).workers(2, command=script)
    client.create(job.build())
    job_dir = JobDir(home / "jobs/default/crash")
    deadline = time.monotonic() + 20
    while len(list(tmp_path.glob("first-run-*"))) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)

    supervisor = job_dir.read_supervisor_pid()
    assert supervisor is not None
    os.kill(supervisor, signal.SIGKILL)
    while tagged_processes(tag):  # its replicas die with it
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # ... and once its watcher has killed whatever they left, the job shows the loss
    while not state_label(client.get("crash")).endswith("(supervisor lost)"):
        assert time.monotonic() < deadline
        time.sleep(0.01)

    finished = client.wait("crash", timeout=30, poll=0.05)  # restarts the supervisor
    assert is_succeeded(finished)

    # Workers may still be starting when the master's success ends the job: give them time.
    def started(replica: str) -> int:
        return [line.text for line in client.logs("crash", replica=replica)].count("started")

    replicas = ("master-0", "worker-0", "worker-1")
    while any(started(r) < 2 for r in replicas) and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    assert [started(r) for r in replicas] == [2, 2, 2]  # lost once, re-run once: no duplicate
    events = [e["reason"] for e in job_dir.read_events()]
    assert events.count("SupervisorLost") == 3


def test_a_supervisor_that_crashes_records_the_job_failed(
    client: TrainingClient, home: Path
) -> None:
    """A failing planner is injected into a supervisor run in-process: the job ends Failed (so
    clients stop waiting and do not restart a supervisor that would crash again)."""
    from trainop_core.backends.local.supervisor import Supervisor

    job = make_job("TFJob", "bug").workers(1, command=py("import time; time.sleep(60)"))
    client.create(job.run_policy(suspend=True).build())
    job_dir = JobDir(home / "jobs/default/bug")
    while (pid := job_dir.read_supervisor_pid()) is None:
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)  # the real supervisor idles while suspended; replace it
    while job_dir.supervisor_alive():
        time.sleep(0.02)

    def broken_planner(*args: object) -> None:
        raise RuntimeError("planner bug")

    with pytest.raises(RuntimeError, match="planner bug"):
        Supervisor(job_dir, planner=broken_planner).run()  # type: ignore[arg-type]
    finished = client.get("bug")
    assert job_state(finished) == "Failed"
    assert "planner bug" in (finished.status.conditions[-1].message or "")


def test_a_multithreaded_creator_starts_the_supervisor_by_exec(
    client: TrainingClient, home: Path, tmp_path: Path
) -> None:
    """Forking a process that runs threads is unsafe: then a fresh interpreter is started."""
    import threading

    gate = tmp_path / "go"
    wait = py(f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)")
    release = threading.Event()
    busy = threading.Thread(target=release.wait)
    busy.start()
    try:
        client.create(make_job("TFJob", "threads").workers(1, command=wait).build())
    finally:
        release.set()
        busy.join()
    job_dir = JobDir(home / "jobs/default/threads")
    while (pid := job_dir.read_supervisor_pid()) is None:
        time.sleep(0.02)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1] == b"-c" and b"trainop_core.backends.local.supervisor" in cmdline[2]
    gate.touch()
    assert is_succeeded(client.wait("threads", timeout=30, poll=0.05))


def test_a_session_whose_number_was_reused_is_never_killed() -> None:
    """Leftover replicas are killed by session; a recorded start time guards against pid reuse."""
    import subprocess

    from trainop_core.backends.process.kubelet import kill_session, started_at

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        started = started_at(proc.pid)
        assert started is not None
        assert kill_session(proc.pid, started + 1) == 0  # "another" leader with this pid
        assert proc.poll() is None
        assert kill_session(proc.pid, started) == 1
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_process_with_native_threads_is_not_forked_from() -> None:
    """Threads started by C libraries are invisible to `threading`; forking past them can hang."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = (
        "from trainop_core.backends.local.spawn import _single_threaded\n"
        "before = _single_threaded()\n"
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "torch.ones(512, 512) @ torch.ones(512, 512)\n"
        "print(before, _single_threaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_a_job_being_deleted_gets_no_new_supervisor(
    client: TrainingClient, home: Path, tag: str
) -> None:
    """A follower that finds the supervisor gone restarts it (`recover`); while a deletion has
    stopped it on purpose, a restarted one would record the replicas the deletion killed as a
    failure. The deletion's request, written before it stops the supervisor, says so."""
    job = make_job("TFJob", "going").workers(1, command=py("import time; time.sleep(60)"))
    client.create(job.build())
    job_dir = JobDir(home / "jobs/default/going")
    deadline = time.monotonic() + 20
    while not tagged_processes(tag):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    supervisor = job_dir.read_supervisor_pid()
    assert supervisor is not None
    job_dir.control_file.write_text('{"delete": true, "reason": "deleted"}')  # as delete does
    os.kill(supervisor, signal.SIGTERM)  # ... then it stops the supervisor
    while job_dir.supervisor_alive():
        assert time.monotonic() < deadline
        time.sleep(0.05)

    assert not LocalBackend(home=home).recover("going", "default")  # what a follower calls
    assert not job_dir.supervisor_alive() and job_dir.control_file.exists()
    assert job_state(client.get("going")) != "Failed"
    client.delete("going")
