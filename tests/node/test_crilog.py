"""CRI log files: written as a container runtime writes them, read as the kubelet reads them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainop_core.node.crilog import (
    CriLogWriter,
    LogOptions,
    follow_chunks,
    format_time,
    parse_record,
    parse_time,
    read_chunks,
)

T0 = 1_700_000_000 * 10**9


def ticking(start: int = T0, step: int = 10**9) -> Iterator[int]:
    now = start
    while True:
        yield now
        now += step


def write(path: Path, *pieces: tuple[str, bytes], max_line: int = 16 * 1024) -> None:
    clock = ticking()
    with CriLogWriter(path, max_line=max_line, clock=lambda: next(clock)) as writer:
        for stream, data in pieces:
            writer.write(stream, data)


def read(paths: list[Path], **options: object) -> bytes:
    return b"".join(read_chunks(paths, LogOptions(**options)))  # type: ignore[arg-type]


def test_records_are_cri_lines_and_long_lines_are_cut(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    write(log, ("stdout", b"abc"), ("stdout", b"defgh\nxy\n"), ("stderr", b"boom"), max_line=4)
    lines = log.read_bytes().splitlines()
    assert [line.split(b" ", 1)[1] for line in lines] == [
        b"stdout P abcd", b"stdout F efgh", b"stdout F xy", b"stderr F boom",
    ]  # fmt: skip
    assert lines[0].startswith(format_time(T0).encode())
    assert read([log]) == b"abcdefgh\nxy\nboom\n"  # pieces joined back into lines
    assert (log.stat().st_mode & 0o777) == 0o600


def test_tail_since_streams_timestamps_and_limit(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    write(log, ("stdout", b"a\nb\n"), ("stderr", b"c\n"), ("stdout", b"d\n"))
    assert read([log], tail_lines=2) == b"c\nd\n"
    assert read([log], tail_lines=0) == b""
    assert read([log], tail_lines=99) == b"a\nb\nc\nd\n"
    assert read([log], since_ns=T0 + 2 * 10**9) == b"c\nd\n"
    assert read([log], streams=frozenset({"stderr"})) == b"c\n"
    assert read([log], limit_bytes=3) == b"a\nb"
    stamped = f"{format_time(T0 + 3 * 10**9)} d\n".encode()
    assert read([log], tail_lines=1, timestamps=True) == stamped


def test_tail_spans_rotated_files_and_ignores_an_unfinished_line(tmp_path: Path) -> None:
    old, new = tmp_path / "0.log", tmp_path / "1.log"
    write(old, ("stdout", b"1\n2\n3\n"))
    write(new, ("stdout", b"4\n"))
    with new.open("ab") as handle:
        handle.write(b"2024-01-01T00:00:00.000000000Z stdout F half")  # being written
    assert read([old, new], tail_lines=3) == b"2\n3\n4\n"
    assert read([old, tmp_path / "absent.log"]) == b"1\n2\n3\n"


def test_malformed_records_are_skipped_and_times_are_checked() -> None:
    assert parse_record(b"nonsense") is None
    assert parse_record(b"2024-01-01T00:00:00Z stdin F x") is None
    record = parse_record(b"2024-01-01T00:00:00.5+01:00 stderr P x y")
    assert record is not None and (record.stream, record.partial, record.text) == (
        "stderr", True, b"x y",
    )  # fmt: skip
    assert record.time_ns == parse_time("2023-12-31T23:00:00.500000000Z")
    for bad in ("yesterday", "2024-01-01T00:00:00", "2024-01-01T00:00:00.x1Z"):
        with pytest.raises(ValueError, match="RFC 3339"):
            parse_time(bad)
    with pytest.raises(ValueError, match="stream"):
        CriLogWriter("/dev/null").write("stdin", b"x")


def test_follow_reads_appended_records_until_the_container_ends(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    writer = CriLogWriter(log)
    writer.write("stdout", b"before\n")
    running = [True]

    async def follow() -> list[bytes]:
        seen: list[bytes] = []
        async for chunk in follow_chunks([log], LogOptions(follow=True), lambda: running[0], 0.01):
            seen.append(chunk)
            if chunk == b"before\n":
                writer.write("stdout", b"after")  # unfinished: close() ends it
                writer.close()
                running[0] = False
        return seen

    assert b"".join(asyncio.run(asyncio.wait_for(follow(), 30))) == b"before\nafter\n"
