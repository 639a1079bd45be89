"""Training progress as a user sees it on the local backend: `trainop run` draws a live bar with
the newest metrics on a terminal and writes plain, rate-limited lines elsewhere; `trainop get`
shows PROGRESS and ETA; a job that prints no progress shows none."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job

from trainop_core.cli._display import PlainDisplay
from trainop_core.cli.main import main
from trainop_core.progress import TrainerStatus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "local"))  # the process scans of the local tests
from local_helpers import leftovers  # noqa: E402 - needs the path above

TRAIN = """
    import time
    for step in range(1, 41):
        print(f"loss={1 / step:.4f} progressPercentage={step * 100 // 40} "
              f"estimatedRemainingSeconds={(40 - step) // 10} step={step}", flush=True)
        time.sleep(0.05)
"""


def py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINOP_HOME", str(home))
    monkeypatch.setenv("TRAINOP_TEST_TAG", tag := uuid.uuid4().hex)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    yield home
    assert leftovers(tag, home) == []


def job_file(tmp_path: Path, name: str, master: list[str]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(make_job("PyTorchJob", name).master(command=master).yaml())
    return path


def test_run_off_a_terminal_writes_progress_at_most_every_ten_seconds_and_get_shows_it(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(job_file(tmp_path, "plain", py(TRAIN)))]) == 0
    out, err = capsys.readouterr()
    assert len([line for line in out.splitlines() if "progressPercentage=" in line]) == 40
    lines = err.splitlines()
    progress = [line for line in lines if "%" in line and "Running" in line]
    assert len(progress) <= 2  # 40 reports in 2 s: the first, and not another within 10 s
    assert lines[-1].startswith("pytorchjob.kubeflow.org/plain Succeeded after ")
    assert lines[-1].endswith("| 100% | ETA 0s | loss=0.025 step=40")
    assert main(["get", "plain"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[3:5] == ["PROGRESS", "ETA"]
    assert row.split()[3:5] == ["100%", "0s"]  # the local supervisor's last write
    assert main(["delete", "plain"]) == 0


def test_a_job_that_prints_no_progress_shows_none(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(job_file(tmp_path, "mute", py("print('training...')")))]) == 0
    err = capsys.readouterr().err
    assert "%" not in err and "ETA" not in err
    assert main(["get", "mute"]) == 0
    _, row = capsys.readouterr().out.splitlines()
    assert row.split()[:3] == ["mute", "PyTorchJob", "Succeeded"]
    assert "%" not in row  # no PROGRESS, no ETA: empty cells
    assert main(["delete", "mute"]) == 0


def test_run_on_a_terminal_draws_a_live_bar_with_the_newest_metrics(
    home: Path, tmp_path: Path
) -> None:
    path = job_file(tmp_path, "tty", py(TRAIN))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainop_core.cli.main", "run", str(path), "--rm"],
        stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True,
    )  # fmt: skip
    os.close(terminal)
    screen = _read_until_exit(controller, proc)
    assert proc.returncode == 0, screen
    assert "━" in screen  # rich's bar
    assert "master-0 | loss=0.0250 progressPercentage=100" in screen  # the lines, above it
    assert "tty: Running" in screen and "loss=" in screen and "step=" in screen
    assert "ETA " in screen
    assert "pytorchjob.kubeflow.org/tty Succeeded after" in screen


def _read_until_exit(fd: int, proc: subprocess.Popen[bytes]) -> str:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other end closed: the process is gone
                data = b""
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def test_plain_lines_say_each_new_state_at_once_and_new_progress_at_most_every_interval() -> None:
    class Out:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def write(self, text: str) -> None:
            self.lines += [t for t in text.split("\n") if t]

        def flush(self) -> None:
            pass

    err, now = Out(), [0.0]
    display = PlainDisplay(err, Out(), every=10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    display.show("job/x", "Running", "master: 1 active", None, 0.0)
    for second in range(1, 26):
        now[0] = float(second)
        display.show("job/x", "Running", "master: 1 active", TrainerStatus(second), now[0])
    display.show("job/x", "Succeeded", "master: 1 succeeded", TrainerStatus(25), 25.0)
    assert [line.split(" | ")[2] if line.count(" | ") > 2 else "-" for line in err.lines] == [
        "-",  # the state, before any progress
        "1%",  # the first progress at once
        "11%",  # then once every 10 s
        "21%",
        "25%",  # a new state at once
    ]
