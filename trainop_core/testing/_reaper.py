"""The control plane's watchdog: when its owner goes away, nothing of the control plane stays.

Started by :class:`~trainop_core.testing.controlplane.ControlPlane` as the leader of a new process
group that etcd, kube-apiserver and kube-controller-manager then join. It blocks reading its
stdin, a pipe whose only writer is the owner: end of file comes when the owner closes it (a clean
stop) or when the owner dies (the kernel closes it, even after SIGKILL). Then it terminates its
process group, kills what is left after a short grace period (the data is thrown away: there
is nothing to shut down gracefully for) and removes the data directory.

Usage (internal): ``python -m trainop_core.testing._reaper DATA_DIR``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) of process group `pgid`, this one excluded."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def reap_group(pgid: int, grace: float = 2.0) -> None:
    """SIGTERM every other member of `pgid`, then SIGKILL whatever is left after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_members(pgid):
            return


def main(argv: list[str]) -> int:
    data_dir = Path(argv[0])
    # Ctrl-C and a stray SIGTERM to the group are for the servers; this process must outlive them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):  # the owner never writes: this returns at end of file
        pass
    reap_group(os.getpgrp())
    shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
