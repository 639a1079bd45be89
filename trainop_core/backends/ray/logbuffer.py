"""A replica's output kept by its job's supervisor: bounded, read by absolute offset. Pure.

The supervisor keeps every replica's output so that it outlives the replica's actor (and node).
Memory is bounded: past `limit` bytes the oldest output is dropped, and a reader that asks for
dropped bytes gets a marker line saying how many it missed, then what is left.
"""

from __future__ import annotations

DEFAULT_LIMIT_BYTES = 8 * 1024 * 1024  # per replica
JOB_LIMIT_BYTES = 32 * 1024 * 1024  # per job, whatever its size: many replicas keep less each
READ_CHUNK_BYTES = 1024 * 1024


def limit_per_replica(replicas: int) -> int:
    """What each of a job's `replicas` keeps: 8 MiB, less in jobs so large that the job would
    keep more than 32 MiB in all. No floor: the job's cap holds for any number of replicas
    (the supervisor's memory reservation counts on it)."""
    return max(1, min(DEFAULT_LIMIT_BYTES, JOB_LIMIT_BYTES // max(replicas, 1)))


class LogBuffer:
    """Bytes appended over time; `start` is the absolute offset of the oldest byte kept."""

    def __init__(self, limit: int = DEFAULT_LIMIT_BYTES) -> None:
        self.limit = limit
        self.start = 0
        self._data = bytearray()

    @property
    def end(self) -> int:
        return self.start + len(self._data)

    def append(self, chunk: bytes) -> None:
        self._data += chunk
        excess = len(self._data) - self.limit
        if excess > 0:
            cut = self._data.find(b"\n", excess - 1)  # keep whole lines where possible
            cut = excess if cut == -1 else cut + 1
            del self._data[:cut]
            self.start += cut

    def read(self, offset: int, limit: int = READ_CHUNK_BYTES) -> tuple[bytes, int]:
        """Bytes from `offset` (at most `limit`) and the offset after them."""
        if offset < self.start:
            text = f"\n--- trainop: {self.start - offset} bytes of older output dropped ---\n"
            marker = text.encode()
            chunk = bytes(self._data[: max(0, limit - len(marker))])
            return marker + chunk, self.start + len(chunk)
        begin = offset - self.start
        chunk = bytes(self._data[begin : begin + limit])
        return chunk, offset + len(chunk)
