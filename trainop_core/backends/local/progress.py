"""The local backend's progress: its supervisor follows the primary replica's log file.

Each round reads what the replica wrote since the last one (at most `MAX_BEHIND_BYTES` behind:
past that only the newest `KEEP_BYTES` are read, the rest counted as a flood) and writes the
job's progress into its annotation in job.json when `trainop_core.progress` says it is due.
"""

from __future__ import annotations

from trainop_core.backends.local.logs import LogTail
from trainop_core.backends.local.state import JobDir
from trainop_core.progress import (
    JobProgress,
    TrainerStatus,
    WriteGate,
    annotate,
    dropped_message,
)

MAX_BEHIND_BYTES = 1024 * 1024
KEEP_BYTES = 64 * 1024


class FileProgress:
    """One job's progress, read from `replica`'s log in `job_dir`. Single-threaded."""

    def __init__(self, job_dir: JobDir, replica: str, written: TrainerStatus | None) -> None:
        self.dir = job_dir
        self.tail = LogTail(replica, job_dir)
        self.progress = JobProgress(self._write, WriteGate(written=written), on_dropped=self._warn)

    def step(self, final: bool = False) -> float | None:
        """Read the new output and write the progress if due; seconds until a write waiting
        now is due (None: none waits). `final`: the replica ended, write what is new at once."""
        skipped = self.tail.catch_up(MAX_BEHIND_BYTES, KEEP_BYTES)
        if skipped:
            self.progress.tracker.skipped(f"{skipped} bytes of output written between two reads")
        for line in self.tail.read(final=final):
            self.progress.tracker.feed(line.text)
        return self.progress.flush(final)

    def close(self) -> None:
        self.tail.close()

    def _write(self, status: TrainerStatus) -> None:
        self.dir.modify_job(lambda data: annotate(data, status))

    def _warn(self, reason: str, detail: str) -> None:
        self.dir.append_event("Warning", "ProgressDropped", dropped_message(reason, detail))
