"""A benchmark driver killed mid-run leaves none of the children it started (operator, kubelet
stand-in): `benchmarks/harness.py` starts each with a parent-death signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import live

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {benchmarks!r})
    import harness
    child = harness._spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"],
                           Path({log!r}))
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    """Running and not a zombie (a reparented child may wait unreaped for a moment)."""
    return bool(live(lambda entry: entry.name == str(pid)))


def command(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux parent-death signal")
def test_a_killed_driver_takes_its_children_with_it(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import harness
    finally:
        sys.path.pop(0)
    if harness.SETPRIV is None:
        pytest.skip("util-linux's setpriv is not installed")
    code = DRIVER.format(benchmarks=str(ROOT / "benchmarks"), log=str(tmp_path / "child.log"))
    driver = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert driver.stdout is not None
        child = int(driver.stdout.readline())
        assert alive(child), "the child did not start"
        # setpriv execs the child in place: the pid the harness measures is the child's own
        deadline = time.monotonic() + 30
        while not command(child).startswith(sys.executable.encode()):
            assert time.monotonic() < deadline, f"pid {child} runs {command(child)!r}"
            time.sleep(0.01)
        driver.send_signal(signal.SIGKILL)  # no handler, no finally: only the kernel can help
        driver.wait(30)
        deadline = time.monotonic() + 30
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), f"child {child} outlived its killed driver"
    finally:
        driver.kill()
        driver.wait()
