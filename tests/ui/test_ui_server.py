"""`trainop ui` without a browser: it is optional (nothing else imports it; without the extra it
says how to install it), its address rules, the bounded pump behind every log stream, and the
views' bounds."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from ui_support import PYTHONPATH

from trainop_core.backends.base import LogLine
from trainop_core.cli.main import main
from trainop_core.ui import is_loopback, non_loopback_warning, parse_address


def python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_the_core_and_the_cli_do_not_import_the_ui_libraries() -> None:
    done = python(
        "import sys, trainop_core, trainop_core.client\n"
        "from trainop_core.cli.main import build_parser\n"
        "build_parser()\n"
        "loaded = {'starlette', 'uvicorn', 'trainop_core.ui.app'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    assert done.returncode == 0, done.stderr


def test_without_the_extra_trainop_ui_says_how_to_install_it() -> None:
    done = python(
        "import sys\n"
        "sys.modules['uvicorn'] = None  # as if the ui extra were not installed\n"
        "from trainop_core.cli.main import main\n"
        "sys.exit(main(['ui']))\n"
    )
    assert done.returncode == 2
    assert "pip install 'trainop[ui]'" in done.stderr


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:8686", ("127.0.0.1", 8686)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:9000", ("localhost", 9000)),
    ],
    ids=["IPv4", "IPv6 in brackets", "a name"],
)
def test_an_address_is_host_and_port(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address", ["8686", "127.0.0.1:", ":8686", "127.0.0.1:http", "127.0.0.1:70000"]
)
def test_a_bad_address_exits_2_naming_it(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--address", address]) == 2
    assert f"--address {address!r}: expected HOST:PORT" in capsys.readouterr().err


def test_only_loopback_addresses_are_served_without_a_warning() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
    assert not is_loopback("example.com")
    assert non_loopback_warning("0.0.0.0").startswith("WARNING: trainop ui serves on 0.0.0.0")


def test_a_pump_holds_a_bounded_number_of_items_while_its_reader_waits() -> None:
    from trainop_core.ui.streams import Pump

    produced = itertools.count()

    def endless() -> Iterator[int]:
        yield from produced

    async def scenario() -> tuple[int, int]:
        pump = Pump(endless(), size=50)
        batches = pump.batches()
        first = await batches.__anext__()  # the reader takes one batch, then stops reading
        # The producer fills the queue and waits; at most the queue and one item in hand.
        await asyncio.wait_for(_until(lambda: pump._queue.qsize() >= 50), 30)
        held = next(produced)
        pump.close()
        await batches.aclose()
        return len(first), held

    taken, held = asyncio.run(scenario())
    assert held <= taken + 50 + 2


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0.01)


def test_a_pump_hands_on_what_its_iterator_raised() -> None:
    from trainop_core.errors import NotFoundError
    from trainop_core.ui.streams import Pump

    def failing() -> Iterator[int]:
        yield 1
        raise NotFoundError("job default/x not found")

    async def scenario() -> list[list[int]]:
        seen = []
        with pytest.raises(NotFoundError, match="x not found"):
            async for batch in Pump(failing()).batches():
                seen.append(batch)
        return seen

    assert asyncio.run(scenario()) == [[1]]


def test_a_long_log_line_is_cut_and_metric_lines_become_points() -> None:
    from trainop_core.ui.views import CUT_MARK, MAX_LINE_CHARS, log_line, metric_points

    replica, text = log_line(LogLine("master-0", "x" * (MAX_LINE_CHARS * 3)))
    assert replica == "master-0" and len(text) == MAX_LINE_CHARS + len(CUT_MARK)
    lines = [LogLine("worker-1", "epoch 1 loss=0.5 acc=0.9 step=3"), LogLine("worker-1", "hi")]
    assert list(metric_points(lines)) == [
        {"replica": "worker-1", "step": 3, "values": {"loss": 0.5, "acc": 0.9}}
    ]


def test_a_watch_says_when_the_backend_fails_then_goes_on_until_the_job_is_gone() -> None:
    from trainop_core.errors import StateError
    from trainop_core.ui.streams import watch

    answers: list[object] = [StateError("cannot list jobs"), {"a": 1}, {"a": 1}, {"a": 2}, None]

    async def snapshot() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def scenario() -> list[bytes]:
        return [chunk async for chunk in watch(snapshot, 0)]

    assert asyncio.run(scenario()) == [
        b'event: failed\ndata: {"error":"cannot list jobs"}\n\n',
        b'event: snapshot\ndata: {"a":1}\n\n',
        b'event: snapshot\ndata: {"a":2}\n\n',
        b"event: gone\ndata: {}\n\n",
    ]


def test_the_page_shows_a_jobs_reported_progress_and_nothing_when_there_is_none() -> None:
    from builders import make_job

    from trainop_core.progress import ANNOTATION, TrainerStatus, encode_annotation
    from trainop_core.ui.views import job_progress

    job = make_job("PyTorchJob", "p").master().job()
    assert job_progress(job) is None
    job.metadata.annotations = {ANNOTATION: encode_annotation(TrainerStatus(45, 3725))}
    assert job_progress(job) == "45% ETA 1h2m"
