"""Pod logs are split into lines as they stream: memory stays bounded whatever the log's size,
even for a line that never ends."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

from trainop_core.backends.kubernetes.pods import MAX_LINE_BYTES, _lines


class StreamedBody:
    """A response body of `lines` short lines and then `tail` bytes without a newline."""

    def __init__(self, lines: int, tail: int) -> None:
        self.lines, self.tail = lines, tail

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        assert amt is not None, "an unbounded read holds the whole body"
        block = b"x" * 99 + b"\n"
        for _ in range(self.lines // 100):
            yield block * 100
        for _ in range(self.tail // amt):
            yield b"y" * amt


def test_a_50_mb_log_is_read_in_bounded_memory() -> None:
    body = StreamedBody(lines=250_000, tail=25 * 1024 * 1024)
    tracemalloc.start()
    count = longest = 0
    for line in _lines(body):
        count += 1
        longest = max(longest, len(line))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 250_000 + 25 * 1024 * 1024 // MAX_LINE_BYTES
    assert longest == MAX_LINE_BYTES
    assert peak < 8 * 1024 * 1024
