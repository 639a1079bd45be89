"""Container logs in the CRI format, written as container runtimes write them, read as a kubelet
reads them for ``kubectl logs``.

A CRI log file holds one record per line: ``<RFC 3339 time with nanoseconds> <stdout|stderr>
<F|P> <text>``; F ends a line of the container's output, P is a piece of a longer one (the writer
cuts lines at `max_line` bytes, 16 KiB as containerd does) continued by the next record of the
same stream. Reading applies the kubelet's options in its order: the last `tail_lines` records,
then those not older than `since`, then the stream filter, each line stamped (``timestamps``)
with its time in RFC 3339 with nine digits, then `limit_bytes`; ``follow`` keeps reading what is
appended until the container stops running.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from trainop_core.private_files import open_append

STREAMS = ("stdout", "stderr")
MAX_LINE = 16 * 1024
_READ = 64 * 1024


def format_time(ns: int) -> str:
    """RFC 3339 in UTC with nine fractional digits, as the kubelet stamps lines."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


def parse_time(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (any number of fractional digits, Z or
    an offset). Raises ValueError naming the text."""
    try:
        main, fraction, zone = _split_time(text)
        seconds = _seconds(main + zone.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time") from None
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    return seconds * 1_000_000_000 + nanos


@functools.lru_cache(maxsize=256)  # a log's lines share their second: parse each once
def _seconds(text: str) -> int:
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError(text)
    return int(when.timestamp())


def _split_time(text: str) -> tuple[str, str, str]:
    cut = max(text.rfind("Z"), text.rfind("+"), text.rfind("-", 19))
    if cut < 19:
        raise ValueError(text)
    main, zone = text[:cut], text[cut:]
    main, _, fraction = main.partition(".")
    if fraction and not fraction.isdigit():
        raise ValueError(text)
    return main, fraction, zone


class CriLogWriter:
    """Appends a container's stdout and stderr to one CRI log file (created 0600, never through
    a link). Thread-safe: stdout and stderr may be pumped from two threads. ``close()`` ends an
    unfinished last line of each stream as a full one; call it before the container is reported
    as no longer running, so a follower reads everything."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_line: int = MAX_LINE,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if max_line < 1:
            raise ValueError(f"max_line must be at least 1, not {max_line}")
        self.path = Path(path)
        self.max_line = max_line
        self._clock = clock
        self._file: IO[Any] = open_append(path, "ab")
        self._pending = {name: bytearray() for name in STREAMS}
        self._lock = threading.Lock()

    def write(self, stream: str, data: bytes) -> None:
        """Record `data` the container wrote on `stream` ("stdout" or "stderr")."""
        if stream not in self._pending:
            raise ValueError(f"stream must be stdout or stderr, not {stream!r}")
        with self._lock:
            pending = self._pending[stream]
            pending += data
            records = list(self._records(stream, pending))
            self._file.write(b"".join(records))
            self._file.flush()

    def _records(self, stream: str, pending: bytearray) -> Iterator[bytes]:
        while True:
            end = pending.find(b"\n", 0, self.max_line + 1)
            if end >= 0:
                yield self._record(stream, "F", bytes(pending[:end]))
                del pending[: end + 1]
            elif len(pending) > self.max_line:  # more follows: this piece is not the end
                yield self._record(stream, "P", bytes(pending[: self.max_line]))
                del pending[: self.max_line]
            else:
                return

    def _record(self, stream: str, tag: str, text: bytes) -> bytes:
        return f"{format_time(self._clock())} {stream} {tag} ".encode() + text + b"\n"

    def close(self) -> None:
        """Write each stream's unfinished line as a full one and close the file. Idempotent."""
        with self._lock:
            if self._file.closed:
                return
            for stream, pending in self._pending.items():
                if pending:
                    self._file.write(self._record(stream, "F", bytes(pending)))
                    pending.clear()
            self._file.close()

    def __enter__(self) -> CriLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Record:
    """One CRI log record."""

    time_ns: int
    stream: str
    partial: bool
    text: bytes  # without the line's end


def parse_record(line: bytes) -> Record | None:
    """A record from one line of a CRI log file (its newline removed); None if malformed."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    stamp, stream, tag = (p.decode("ascii", "replace") for p in parts[:3])
    if stream not in STREAMS:
        return None
    try:
        when = parse_time(stamp)
    except ValueError:
        return None
    partial = tag.split(":")[0] == "P"
    return Record(when, stream, partial, parts[3] if len(parts) > 3 else b"")


@dataclass(frozen=True)
class LogOptions:
    """What ``GET /containerLogs`` asks for (see the module docstring for the order)."""

    tail_lines: int | None = None  # None: every line
    since_ns: int | None = None
    timestamps: bool = False
    limit_bytes: int | None = None
    follow: bool = False
    streams: frozenset[str] = frozenset(STREAMS)


class _Formatter:
    """Turns records into output: filtering, stamping, the byte limit."""

    def __init__(self, options: LogOptions) -> None:
        self.options = options
        self.left = options.limit_bytes
        self._in_line: set[str] = set()  # streams whose last record was a piece of a line

    @property
    def done(self) -> bool:
        return self.left is not None and self.left <= 0

    def format(self, record: Record) -> bytes:
        opts = self.options
        if record.stream not in opts.streams:
            return b""
        if opts.since_ns is not None and record.time_ns < opts.since_ns:
            return b""
        stamp = opts.timestamps and record.stream not in self._in_line
        out = (format_time(record.time_ns) + " ").encode() if stamp else b""
        out += record.text if record.partial else record.text + b"\n"
        if record.partial:  # the stream's next record continues this line: no stamp on it
            self._in_line.add(record.stream)
        else:
            self._in_line.discard(record.stream)
        if self.left is not None:
            out = out[: self.left]
            self.left -= len(out)
        return out


def tail_start(paths: Sequence[Path], lines: int) -> tuple[int, int]:
    """(file index, offset) where the last `lines` complete lines of `paths` begin."""
    if lines <= 0:
        return len(paths) - 1, _complete_size(paths[-1]) if paths else 0
    for index in range(len(paths) - 1, -1, -1):
        found, offset = _tail_in(paths[index], lines)
        lines -= found
        if lines <= 0:
            return index, offset
    return 0, 0


def _complete_size(path: Path) -> int:
    """The size of `path` up to its last newline."""
    try:
        with open(path, "rb") as handle:
            return _scan_back(handle, 1)[1]
    except FileNotFoundError:
        return 0


def _tail_in(path: Path, lines: int) -> tuple[int, int]:
    """How many of the last `lines` lines `path` holds, and where they begin."""
    try:
        with open(path, "rb") as handle:
            found, end = _scan_back(handle, 1)  # ignore an unfinished last line
            if found == 0:
                return 0, 0
            count, start = _scan_back(handle, lines + 1, end)
    except FileNotFoundError:
        return 0, 0
    if count <= lines:  # the file's first line is among them
        return count, 0
    return lines, start


def _scan_back(handle: IO[bytes], newlines: int, end: int | None = None) -> tuple[int, int]:
    """Going back from `end` (default: the end), how many of `newlines` newlines were found and
    the offset just after the last one found."""
    position = handle.seek(0, os.SEEK_END) if end is None else end
    found, after = 0, 0
    while position > 0:
        step = min(_READ, position)
        position -= step
        handle.seek(position)
        block = handle.read(step)
        cut = len(block)
        while found < newlines:
            at = block.rfind(b"\n", 0, cut)
            if at < 0:
                break
            found, after, cut = found + 1, position + at + 1, at
        if found == newlines:
            return found, after
    return found, after


def read_chunks(paths: Sequence[Path], options: LogOptions) -> Iterator[bytes]:
    """The logs of `paths` (oldest file first) as `options` ask, without following."""
    formatter = _Formatter(options)
    index, offset = (0, 0) if options.tail_lines is None else tail_start(paths, options.tail_lines)
    yield from _batched(_formatted(paths[index:], offset, formatter))


def _formatted(paths: Sequence[Path], offset: int, formatter: _Formatter) -> Iterator[bytes]:
    """Each record's output, the first file read from `offset`."""
    for path in paths:
        for record in _records(path, offset):
            out = formatter.format(record)
            if out:
                yield out
            if formatter.done:
                return
        offset = 0


def _batched(outputs: Iterator[bytes], size: int = _READ) -> Iterator[bytes]:
    """Outputs joined into chunks of about `size` bytes (one write per chunk, not per line)."""
    batch: list[bytes] = []
    held = 0
    for out in outputs:
        batch.append(out)
        held += len(out)
        if held >= size:
            yield b"".join(batch)
            batch, held = [], 0
    if batch:
        yield b"".join(batch)


def _records(path: Path, offset: int) -> Iterator[Record]:
    try:
        handle = open(path, "rb")  # noqa: SIM115  # closed by the `with` below
    except FileNotFoundError:
        return
    with handle:
        handle.seek(offset)
        for line in handle:
            if line.endswith(b"\n"):
                record = parse_record(line[:-1])
                if record is not None:
                    yield record


async def follow_chunks(
    paths: Sequence[Path],
    options: LogOptions,
    running: Callable[[], bool],
    poll: float = 0.2,
) -> AsyncIterator[bytes]:
    """``read_chunks``, then what is appended to the last file, until `running()` is False
    (read once more after that, so nothing written before it ended is lost)."""
    formatter = _Formatter(options)
    index, offset = (0, 0) if options.tail_lines is None else tail_start(paths, options.tail_lines)
    for chunk in _batched(_formatted(paths[index:-1], offset, formatter)):
        yield chunk
    if index < len(paths) - 1:
        offset = 0
    if not paths or formatter.done:
        return
    with _Follower(paths[-1], offset) as follower:
        last_look = False
        while not formatter.done:
            records = follower.read()
            outputs = [formatter.format(r) for r in records if not formatter.done]
            if any(outputs):
                yield b"".join(outputs)
            if not records:
                if last_look:
                    return
                last_look = not running()
                if not last_look:
                    await asyncio.sleep(poll)


class _Follower:
    """Reads complete records appended to one file (waits for it to appear)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self._handle: IO[bytes] | None = None
        self._partial = b""

    def read(self) -> list[Record]:
        if self._handle is None:
            try:
                self._handle = open(self.path, "rb")  # noqa: SIM115  # closed in __exit__
            except FileNotFoundError:
                return []
            self._handle.seek(self.offset)
        data = self._partial + self._handle.read(_READ)
        lines = data.split(b"\n")
        self._partial = lines.pop()
        records = (parse_record(line) for line in lines)
        return [r for r in records if r is not None]

    def __enter__(self) -> _Follower:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
