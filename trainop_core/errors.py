"""The small error hierarchy every layer raises.

`TrainopError` is the root. `TerminalError` marks failures that retrying cannot fix (bad input, a
forbidden transition), as controller-runtime's TerminalError does; everything else may be retried.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class TrainopError(Exception):
    """Root of every error trainop raises on purpose."""


class TerminalError(TrainopError):
    """Retrying will not help: the input or the request itself is wrong."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (a dotted field path) and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidJobError(TerminalError):
    """A job (or a file of jobs) failed loading, defaulting or validation; lists every problem."""

    def __init__(self, problems: Iterable[Problem], *, source: str = "", job: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        self.job = job
        super().__init__(self._render())

    def _render(self) -> str:
        prefix = ": ".join(p for p in (self.source, self.job) if p)
        lines = [f"{prefix}: {p}" if prefix else str(p) for p in self.problems]
        return "\n".join(lines)


class InvalidConfigError(InvalidJobError):
    """A configuration file (decorators) failed loading; lists every problem with its field path.

    A kind of InvalidJobError so that every command that reports bad input reports it the same
    way (the file, then each problem)."""


class NotFoundError(TrainopError):
    """The named job (or replica) does not exist."""


class AlreadyExistsError(TerminalError):
    """A live job with this namespace/name already exists."""


class JobTimeoutError(TrainopError):
    """Waiting for a job ran out of time; the job itself may still be running."""


class InvalidNameError(TerminalError):
    """A job name, namespace or replica name that no job can have (e.g. "../x"): refused before
    any backend looks anything up, so no lookup can reach outside its store."""


class DamagedJobError(TrainopError):
    """The job exists but its stored state cannot be read; the message says which file and how
    to remove the job."""


class StateError(TrainopError):
    """The backend's own state cannot be read or written (a read-only or full disk, a permission
    error); the message names the path and the cause."""
