"""The test cluster's own clean-up (raycluster.py): a test process killed mid-run leaves nothing
behind (its reaper destroys the cluster), and a later session removes only what a dead owner
left. Stand-in processes play the nodes, so these run in seconds without Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import raycluster
from ray_helpers import until

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(bool(raycluster.available()), reason=raycluster.available())


def _alive(pid: int) -> bool:
    return raycluster._start_time(pid) != ""


def _netns() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


OWNER = textwrap.dedent("""
    import os, subprocess, sys, tempfile, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import raycluster as rc

    root = Path(tempfile.mkdtemp(prefix="trt-", dir="/tmp"))
    tag = os.urandom(3).hex()
    rc.write_owner(tag, root)
    rc.start_reaper(tag, root)
    netns = f"trn{tag}-1"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    # a worker node's process, in its namespace and carrying the marker
    node = subprocess.Popen(["ip", "netns", "exec", netns, "sleep", "600"],
                            env={**os.environ, rc.MARKER: tag}, start_new_session=True)
    # a head daemon: no marker (setproctitle overwrote it), but a log file under the root
    daemon = subprocess.Popen(["sleep", "600"], stdout=(root / "gcs.out").open("w"),
                              start_new_session=True)
    print(tag, root, node.pid, daemon.pid, flush=True)
    time.sleep(600)
""")


def test_a_test_process_killed_mid_run_leaves_nothing_behind() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(HERE)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    tag, root, *pids = owner.stdout.readline().split()
    assert f"trn{tag}-1" in _netns() and all(_alive(int(p)) for p in pids)
    owner.send_signal(signal.SIGKILL)  # as a crashed or killed pytest
    owner.wait()
    until(lambda: not any(_alive(int(p)) for p in pids), timeout=30, what="processes killed")
    until(lambda: f"trn{tag}-1" not in _netns(), timeout=30, what="namespace removed")
    until(lambda: not Path(root).exists(), timeout=30, what="temp root removed")
    assert not (raycluster.OWNERS / f"{tag}.json").exists()


def test_a_new_session_sweeps_only_what_dead_owners_left() -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True)  # fmt: skip
    dead_pid = int(finished.stdout)
    live, dead = os.urandom(3).hex(), os.urandom(3).hex()
    root = Path(tempfile.mkdtemp(prefix="trt-", dir="/tmp"))
    try:
        raycluster.write_owner(live, root)  # owned by this (live) process
        raycluster.OWNERS.joinpath(f"{dead}.json").write_text(f'{{"pid": {dead_pid}}}')
        for tag in (live, dead):
            subprocess.run(["ip", "netns", "add", f"trn{tag}-1"], check=True)
        legacy = raycluster.NETNS_ETC / f"trn{dead}-2"  # a namespace removed by hand: its dir
        legacy.mkdir(parents=True)
        swept = raycluster.sweep_stale()
        assert dead in swept and live not in swept
        assert f"trn{live}-1" in _netns() and f"trn{dead}-1" not in _netns()
        assert not legacy.exists() and root.exists()
        assert not (raycluster.OWNERS / f"{dead}.json").exists()
    finally:
        raycluster.destroy(live)
        raycluster.remove_owner(live)
    assert f"trn{live}-1" not in _netns() and not root.exists()
