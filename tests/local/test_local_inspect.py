"""What a page about one job reads through the client on this machine: each replica's last lines
(`logs(tail=N)`, without reading what came before), its replicas as last seen (restarts, exit
codes) and its events."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import py

from trainop_core.backends.local.logs import MAX_LINE_BYTES, tail_offset
from trainop_core.client import TrainingClient
from trainop_core.errors import NotFoundError

pytestmark = pytest.mark.timeout(300)


class CountingReads(io.BytesIO):
    """A file that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.read_bytes += len(chunk)
        return chunk


@pytest.mark.parametrize(
    ("data", "lines", "expected"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\nc\n", 5, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"", 3, b""),
        (b"\n\n\n", 2, b"\n\n"),
    ],
    ids=[
        "the last two of three ended lines",
        "an unended last line counts as a line",
        "more lines asked than written: all of them",
        "none asked: from the end",
        "an empty file",
        "empty lines are lines",
    ],
)
def test_the_tail_starts_at_the_last_lines(data: bytes, lines: int, expected: bytes) -> None:
    handle = io.BytesIO(data)
    assert data[tail_offset(handle, lines) :] == expected


def test_the_tail_of_a_huge_file_reads_only_its_end() -> None:
    data = b"".join(b"line %d\n" % i for i in range(2_000_000))  # about 26 MB
    handle = CountingReads(data)
    start = tail_offset(handle, 3)
    assert data[start:] == b"line 1999997\nline 1999998\nline 1999999\n"
    assert handle.read_bytes <= 64 * 1024 + 1


def test_the_tail_of_one_endless_line_is_bounded() -> None:
    data = b"x" * (3 * MAX_LINE_BYTES)
    assert tail_offset(io.BytesIO(data), 1) == 2 * MAX_LINE_BYTES


def test_logs_with_tail_give_each_replicas_last_lines_then_follow(
    client: TrainingClient, workdir: Path
) -> None:
    code = "import sys\nfor i in range(1, 101): print(f'line {i}')\n"
    job = make_job("PyTorchJob", "tail").master().workers(1).command(py(code)).build()
    client.create(job, workdir=workdir)
    client.wait("tail", timeout=120)
    lines = [(line.replica, line.text) for line in client.logs("tail", tail=2)]
    assert lines == [
        ("master-0", "line 99"),
        ("master-0", "line 100"),
        ("worker-0", "line 99"),
        ("worker-0", "line 100"),
    ]
    followed = [line.text for line in client.logs("tail", replica="worker-0", follow=True, tail=1)]
    assert followed == ["line 100"]
    with pytest.raises(ValueError, match="tail must not be negative"):
        client.logs("tail", tail=-1)


def test_replicas_say_how_each_ended_and_events_say_what_happened(
    client: TrainingClient, workdir: Path
) -> None:
    fail_once = (
        "import os, pathlib, sys\n"
        "mark = pathlib.Path('ran-' + os.environ['RANK'])\n"
        "if os.environ['RANK'] == '0' and not mark.exists():\n"
        "    mark.touch(); sys.exit(3)\n"
    )
    job = (
        make_job("PyTorchJob", "inspect")
        .master(restart_policy="OnFailure")
        .workers(1)
        .command(py(fail_once))
        .build()
    )
    client.create(job, workdir=workdir)
    client.wait("inspect", timeout=120)
    pods = {f"{p.replica_type.lower()}-{p.index}": p for p in client.replicas("inspect")}
    assert list(pods) == ["master-0", "worker-0"]
    assert pods["master-0"].phase == "Succeeded" and pods["master-0"].restart_count == 1
    assert pods["worker-0"].restart_count == 0
    events = client.events("inspect")
    assert [e.reason for e in events][-2:] == ["ExitedWithCode", "PyTorchJobSucceeded"]
    assert all(e.time and e.type in ("Normal", "Warning") for e in events)
    with pytest.raises(NotFoundError):
        client.replicas("nosuchjob")
    with pytest.raises(NotFoundError):
        client.events("nosuchjob")
