"""`trainop queue` and `trainop submit --queue` on the local backend, as a user types them."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job

from trainop_core.backends.local.queueing import QUEUE_LABEL
from trainop_core.cli.main import main
from trainop_core.testing.builders import wait_for

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "local"))  # the process scans of the local tests
from local_helpers import leftovers, py  # noqa: E402 - needs the path above

TIMEOUT = 120.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "home"
    monkeypatch.setenv("TRAINOP_HOME", str(path))
    monkeypatch.setenv("TRAINOP_TEST_TAG", uuid.uuid4().hex)
    yield path
    space = path / "jobs" / "default"
    names = sorted(p.name for p in space.glob("[!.]*"))
    if names:
        main(["delete", *names])
    assert leftovers(os.environ["TRAINOP_TEST_TAG"], path) == []


def job_file(tmp_path: Path, name: str, hold: Path | None = None) -> Path:
    wait = f"while not os.path.exists({str(hold)!r}): time.sleep(0.02)" if hold else ""
    script = py(f"import os, time\n{wait}\n")
    job = make_job("PyTorchJob", name).master(command=script)
    job.container("Master", resources={"requests": {"cpu": "1"}})
    path = tmp_path / f"{name}.yaml"
    path.write_text(job.yaml())
    return path


def get_table(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, str]]:
    """`trainop get`'s rows by job name, each a mapping of column to cell."""
    capsys.readouterr()
    assert main(["get"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    columns = header.split()
    starts = [header.index(column) for column in columns]
    ends = [*starts[1:], None]
    rows = [
        {c: line[a:b].strip() for c, a, b in zip(columns, starts, ends, strict=True)}
        for line in lines
    ]
    return {row["NAME"]: row for row in rows}


def test_submit_queue_waits_for_the_quota_set_by_queue_set_and_get_says_why(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = tmp_path / "release"
    assert main(["queue", "set", "q", "--cpu", "1", "--memory", "2Gi"]) == 0
    assert capsys.readouterr().out == "queue q: cpu 1, memory 2Gi\n"
    assert main(["submit", str(job_file(tmp_path, "first", hold=release)), "--queue", "q"]) == 0
    assert main(["submit", str(job_file(tmp_path, "second")), "--queue", "q"]) == 0
    assert main(["submit", str(job_file(tmp_path, "third")), "--queue", "q"]) == 0

    def settled() -> dict[str, dict[str, str]] | None:
        rows = get_table(capsys)
        queued = rows["first"]["STATE"] == "Running" and rows["third"]["STATE"] == "Queued"
        return rows if queued else None

    rows = wait_for(settled, TIMEOUT)
    assert rows["third"]["MESSAGE"] == (
        "insufficient unused quota in queue 'q' for cpu (cpu: requests 1, 0 of 1 free)"
    )
    assert rows["first"]["MESSAGE"] == ""
    assert main(["get", "third", "-o", "yaml"]) == 0
    assert f"{QUEUE_LABEL}: q" in capsys.readouterr().out

    assert main(["queue", "list"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "QUEUE   CPU   MEMORY   USED CPU   USED MEMORY   ADMITTED   WAITING",
        "q       1     2Gi      1          0             1          2",
    ]
    assert main(["delete", "second"]) == 0  # a queued job
    release.touch()
    wait_for(lambda: get_table(capsys)["third"]["STATE"] == "Succeeded", TIMEOUT, interval=0.1)
    assert "second" not in get_table(capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["queue", "set", "Q", "--cpu", "1"], "error: 'Q' is not a queue name"),
        (["queue", "set", "q"], "error: give --cpu, --memory or both"),
        (["queue", "set", "q", "--cpu", "lots"], "error: --cpu: 'lots' is not a quantity"),
        (["queue", "set", "q", "--memory=-1Gi"], "error: --memory: '-1Gi' is not a non-neg"),
        (["queue", "set", "q", "--cpu", "1e400"], "error: --cpu: '1e400' is larger than"),
        (["queue", "set", "q", "--cpu", "1e30"], "error: --cpu: '1e30' is larger than"),
        (["queue", "set", "q", "--memory", "1e400Ei"], "error: --memory: '1e400Ei' is larg"),
        (["queue", "set", "q", "--cpu", "0.0001"], "error: --cpu: '0.0001' is finer than 1m"),
        (["queue", "priority", "high", "1e3"], "error: VALUE: '1e3' is not an integer"),
        (["queue", "priority", "high", "2000000000"], "error: VALUE: 2000000000 is outside"),
    ],
    ids=[
        "a queue name that Kubernetes would refuse",
        "a quota with nothing in it",
        "a CPU that is not a quantity",
        "a negative memory",
        "a CPU no double can hold",
        "a CPU over Kubernetes' bound",
        "a memory no double can hold",
        "a CPU finer than a millicore",
        "a priority that is not an integer",
        "a priority only system classes may have",
    ],
)
def test_bad_queue_settings_exit_2_saying_what_is_wrong(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(message)
    assert not (home / "queues.json").exists()


def test_submit_with_a_bad_queue_name_creates_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", str(job_file(tmp_path, "job")), "--queue", "Not_A_Queue"]) == 2
    assert "--queue: 'Not_A_Queue': expected a queue name" in capsys.readouterr().err
    assert not (home / "jobs" / "default" / "job").exists()


def test_a_damaged_queue_configuration_is_named_and_nothing_is_created(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    (home / "queues.json").write_text('{"queues": {"q": {"cpu": "many"}}}')
    assert main(["submit", str(job_file(tmp_path, "job")), "--queue", "q"]) == 2
    assert capsys.readouterr().err.startswith(
        f"{home / 'queues.json'}: cannot be read: cpu: 'many' is not a quantity"
    )
    assert main(["queue", "list"]) == 2
    assert "queues.json: cannot be read" in capsys.readouterr().err
    assert not (home / "jobs" / "default" / "job").exists()


def test_queue_reset_repairs_a_damaged_configuration_keeping_it_aside(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    (home / "queues.json").write_text('{"queues": {"q": {"cpu": "1e400"}}}')
    assert main(["queue", "set", "q", "--cpu", "2"]) == 2
    assert "`trainop queue reset`" in capsys.readouterr().err  # the repair is named
    assert main(["queue", "reset"]) == 0
    assert "queues.json.bak" in capsys.readouterr().out
    assert (home / "queues.json.bak").read_text().endswith('"1e400"}}}')
    assert main(["queue", "list"]) == 0
    assert main(["queue", "set", "q", "--cpu", "2"]) == 0
    assert main(["queue", "reset"]) == 0 and main(["queue", "reset"]) == 0
    assert "nothing was set" in capsys.readouterr().out


def test_a_fifo_at_the_queue_configuration_is_refused_at_once_not_waited_on(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    os.mkfifo(home / "queues.json")
    assert main(["queue", "list"]) == 2  # before, this waited forever for a writer
    err = capsys.readouterr().err
    assert "queues.json: cannot be read:" in err and "is not a regular file" in err


def test_the_largest_quota_kubernetes_allows_is_written_and_read_back(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["queue", "set", "q", "--cpu", str(2**63 - 1), "--memory", "7Ei"]) == 0
    capsys.readouterr()
    assert main(["queue", "list"]) == 0  # what was written can be read back
    assert "q" in capsys.readouterr().out
