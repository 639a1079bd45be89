"""Following a job: logs at constant memory whatever their size, and `trainop run` to the very
end even when the job is deleted under it (by `trainop delete` or ttlSecondsAfterFinished: 0)
or waits suspended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import py

from trainop_core.client import TrainingClient, is_succeeded

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
OK = py("print('done')")
LOG_MB = 50


@pytest.fixture
def cli_env(home: Path, tag: str) -> dict[str, str]:
    """The environment of a `trainop` subprocess: this test's TRAINOP_HOME and tag, this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def trainop(env: dict[str, str], *args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainop_core.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


# Runs the CLI and prints its own peak RSS (KiB) as the last line of stderr.
PEAK = (
    "import resource, sys\n"
    "from trainop_core.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def peak_rss_mib(env: dict[str, str], *args: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=240,
        check=True,
    )
    return int(done.stderr.split()[-1]) / 1024


@pytest.fixture
def big_log(client: TrainingClient, home: Path) -> Iterator[Path]:
    """A finished job whose worker wrote LOG_MB MiB (short lines, then one without a newline)."""
    client.create(make_job("TFJob", "chatty").workers(1, command=OK).build())
    assert is_succeeded(client.wait("chatty", timeout=60, poll=0.05))
    log = home / "jobs" / "default" / "chatty" / "logs" / "worker-0.log"
    line = b"x" * 99 + b"\n"
    with log.open("ab") as out:
        for _ in range(LOG_MB * 1024 * 1024 // len(line) // 2):
            out.write(line)
        out.write(b"y" * (LOG_MB * 1024 * 1024 // 2))  # half the log in one unending line
    yield log


@pytest.mark.parametrize("follow", [[], ["-f"]], ids=["logs", "logs -f"])
def test_logs_of_a_50_mb_log_take_constant_memory(
    cli_env: dict[str, str], big_log: Path, follow: list[str]
) -> None:
    baseline = peak_rss_mib(cli_env, "get", "chatty")
    reading = peak_rss_mib(cli_env, "logs", "chatty", *follow)
    assert reading - baseline < 30, f"{reading:.0f} MiB against {baseline:.0f} MiB for get"


def test_a_line_without_an_end_comes_out_in_bounded_pieces(
    client: TrainingClient, big_log: Path
) -> None:
    longest = max(len(line.text) for line in client.logs("chatty"))
    assert longest <= 256 * 1024


def test_run_of_a_job_deleted_at_once_by_its_ttl_prints_everything_and_its_state(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    lines = py("for i in range(2000): print('line', i)")
    # AllWorkers: the job ends when both workers have (with the default policy it ends with
    # worker 0, and its TTL of 0 then stops worker 1 mid-output, as it should).
    job = (
        make_job("TFJob", "ttl0")
        .workers(2, command=lines)
        .spec(successPolicy="AllWorkers")
        .run_policy(ttlSecondsAfterFinished=0)
    )
    path = tmp_path / "ttl0.yaml"
    path.write_text(job.yaml())

    done = trainop(cli_env, "run", str(path))
    out, err = done.communicate(timeout=120)

    assert done.returncode == 0, err
    assert "Traceback" not in err
    for replica in ("worker-0", "worker-1"):
        printed = [line for line in out.splitlines() if line.startswith(f"{replica} | line")]
        assert len(printed) == 2000, (replica, len(printed))
    assert "Succeeded" in err


def test_run_of_a_job_deleted_under_it_ends_with_its_last_state(
    cli_env: dict[str, str], client: TrainingClient, tmp_path: Path
) -> None:
    sleeper = py("import time; print('up', flush=True); time.sleep(600)")
    path = tmp_path / "doomed.yaml"
    path.write_text(make_job("TFJob", "doomed").workers(1, command=sleeper).yaml())

    running = trainop(cli_env, "run", str(path))
    assert running.stdout is not None
    # Deleted only once the run itself has streamed the replica's line (the replica's log says
    # so earlier, and a deletion then could remove the log before the run read it).
    streamed = running.stdout.readline()
    assert streamed == "worker-0 | up\n", streamed
    client.delete("doomed")
    _, err = running.communicate(timeout=60)

    assert running.returncode == 1
    assert "was deleted while" in err  # the last state the run had seen (Pending or Running)
    assert "Traceback" not in err


def test_run_of_a_suspended_job_says_so_and_runs_it_when_resumed(
    cli_env: dict[str, str], client: TrainingClient, tmp_path: Path
) -> None:
    job = make_job("TFJob", "later").workers(1, command=OK).run_policy(suspend=True)
    path = tmp_path / "later.yaml"
    path.write_text(job.yaml())
    running = trainop(cli_env, "run", str(path))
    assert running.stderr is not None
    said = ""
    deadline = time.monotonic() + 60
    while "is suspended" not in said and time.monotonic() < deadline:
        said += running.stderr.readline()
    assert "is suspended (spec.runPolicy.suspend: true)" in said

    client.resume("later")
    out, err = running.communicate(timeout=60)

    assert running.returncode == 0, err
    assert "worker-0 | done" in out
