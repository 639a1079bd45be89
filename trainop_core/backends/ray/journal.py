"""What a job's supervisor records for its readers: events, and each replica's output.

Both outlive the replicas' actors (and nodes), and both are bounded: at most `MAX_EVENTS`
events, and each replica's output in a `LogBuffer` of `limit_per_replica` bytes. Every method
takes the supervisor's lock (a Condition), and notifies it when something was added, so that
followers and waiters wake up.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

from trainop_core.backends.ray.logbuffer import READ_CHUNK_BYTES, LogBuffer, limit_per_replica

MAX_EVENTS = 1000
READ_LIMIT_BYTES = 4 * 1024 * 1024  # of output in one answer to `read`, however many replicas


class Journal:
    def __init__(self, replicas: tuple[str, ...], lock: threading.Condition) -> None:
        self.lock = lock
        limit = limit_per_replica(len(replicas))
        self.logs = {replica: LogBuffer(limit) for replica in replicas}
        self.events: list[dict[str, str]] = []
        self._line_open: dict[str, bool] = {}  # a replica's output ends mid-line

    def append(self, replica: str, data: bytes) -> None:
        if data:
            with self.lock:
                self.logs[replica].append(data)
                self._line_open[replica] = not data.endswith(b"\n")
                self.lock.notify_all()

    def mark(self, replica: str, what: str) -> None:
        """A `--- trainop: ... ---` line in the replica's output, on a line of its own."""
        prefix = "\n" if self._line_open.get(replica) else ""
        self.append(replica, f"{prefix}--- trainop: {what} ---\n".encode())

    def event(self, type_: str, reason: str, message: str) -> None:
        record = {"time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        record.update(type=type_, reason=reason, message=message)
        with self.lock:
            self.events.append(record)
            del self.events[:-MAX_EVENTS]

    def read(self, offsets: dict[str, int]) -> dict[str, tuple[bytes, int, int]]:
        """Per replica in `offsets`: its output from that offset (bounded), the next offset, and
        the end of what is kept."""
        budget = READ_LIMIT_BYTES
        chunks: dict[str, tuple[bytes, int, int]] = {}
        with self.lock:
            for replica, offset in offsets.items():
                buffer = self.logs.get(replica)
                if buffer is not None:
                    data, after = buffer.read(offset, min(READ_CHUNK_BYTES, budget))
                    budget -= len(data)
                    chunks[replica] = (data, after, buffer.end)
        return chunks

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.events)
