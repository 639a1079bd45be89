"""How `trainop run` shows a running job: its replicas' lines on stdout, and on stderr its state
with the newest progress its primary replica reported (`trainop_core.progress`).

On a terminal (stderr a TTY) one live line (rich) redraws in place: state and replicas, a bar
with the percent once the replica reported one (none before: nothing is made up), its
estimated time left, the time elapsed and the newest metrics. Anywhere else (CI logs, a pipe)
plain lines: one whenever the state changes, and when only the progress changed at most one
every `PLAIN_PROGRESS_SECONDS`, so a log stays readable however often the replica reports.
Both are safe to call from the log thread and the watching thread at once.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from trainop_core.progress import TrainerStatus, duration

if TYPE_CHECKING:
    from rich.progress import Task

PLAIN_PROGRESS_SECONDS = 10.0
REFRESH_PER_SECOND = 4


class Display(Protocol):
    def log(self, text: str) -> None:
        """Print a replica's line on stdout (above the live line on a terminal). No waiting."""
        ...

    def say(self, text: str) -> None:
        """Print a message on stderr (above the live line on a terminal)."""
        ...

    def show(
        self, label: str, state: str, detail: str, progress: TrainerStatus | None, elapsed: float
    ) -> None:
        """The job (`pytorchjob.kubeflow.org/x`), its state, its replicas (`detail`) and its
        newest progress; the display decides whether and how it is drawn."""
        ...

    def close(self) -> None:
        """Leave the last state drawn and stop drawing. Idempotent."""
        ...


def display_for(err: TextIO, out: TextIO | None = None) -> Display:
    """A live line where `err` is a terminal, plain lines elsewhere."""
    out = out if out is not None else sys.stdout
    return LiveDisplay(err, out) if err.isatty() else PlainDisplay(err, out)


class PlainDisplay:
    """A line whenever the state changes; progress alone at most every `every` seconds."""

    def __init__(
        self,
        err: TextIO,
        out: TextIO,
        every: float = PLAIN_PROGRESS_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.err, self.out, self.every, self.clock = err, out, every, clock
        self.lock = threading.Lock()
        self.state = ""
        self.progress = ""
        self.printed = float("-inf")

    def log(self, text: str) -> None:
        with self.lock:
            print(text, file=self.out, flush=True)

    def say(self, text: str) -> None:
        with self.lock:
            self.state = ""  # whatever comes next is news again
            print(text, file=self.err, flush=True)

    def show(
        self, label: str, state: str, detail: str, progress: TrainerStatus | None, elapsed: float
    ) -> None:
        line = f"{label}: {state} | {detail}"
        summary = progress.summary() if progress is not None else ""
        now = self.clock()
        with self.lock:
            if line == self.state and not self._progress_news(summary, now):
                return
            self.state, self.progress, self.printed = line, summary, now
            parts = [line, summary] if summary else [line]
            print(f"{' | '.join(parts)} | {elapsed:.1f}s", file=self.err, flush=True)

    def _progress_news(self, summary: str, now: float) -> bool:
        """The first progress at once, then a change at most every `every` seconds."""
        if summary == self.progress:
            return False
        return not self.progress or now - self.printed >= self.every

    def close(self) -> None:
        return None


class LiveDisplay:
    """One live line on the terminal `err`, redrawn REFRESH_PER_SECOND times a second."""

    def __init__(self, err: TextIO, out: TextIO) -> None:
        from rich.console import Console

        self.out = out
        self.console = Console(file=err)
        self.logs_on_terminal = out.isatty()
        self.progress = _progress(self.console)
        self.task = self.progress.add_task("", total=None, eta="", metrics="")
        self.progress.start()
        self.closed = False

    def log(self, text: str) -> None:
        if self.logs_on_terminal:  # above the live line, as the terminal would show it
            from rich.text import Text

            self.console.print(Text(text), soft_wrap=True)
        else:
            print(text, file=self.out, flush=True)

    def say(self, text: str) -> None:
        from rich.text import Text

        self.console.print(Text(text), soft_wrap=True)

    def show(
        self, label: str, state: str, detail: str, progress: TrainerStatus | None, elapsed: float
    ) -> None:
        name = label.rsplit("/", 1)[-1]  # the kind was said when the job was created
        percent = progress.progress_percentage if progress is not None else None
        seconds = progress.estimated_remaining_seconds if progress is not None else None
        metrics = " ".join(f"{n}={v}" for n, v in progress.metrics) if progress else ""
        self.progress.update(
            self.task,
            description=f"{name}: {state}" if progress else f"{name}: {state} | {detail}",
            total=None if percent is None else 100,
            completed=percent or 0,
            eta="" if seconds is None else f"ETA {duration(seconds)}",
            metrics=metrics,
        )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.progress.stop()


def _progress(console: Any) -> Any:
    """rich's Progress with trainop's columns; the bar and percent only once one is known."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.table import Column
    from rich.text import Text

    class Bar(BarColumn):
        def render(self, task: Task) -> Any:
            return Text("") if task.total is None else super().render(task)

    class Percent(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text("" if task.total is None else f"{task.completed:.0f}%")

    def text(template: str, **column: Any) -> TextColumn:
        return TextColumn(template, table_column=Column(no_wrap=True, **column))

    return Progress(
        text("{task.description}", overflow="ellipsis", max_width=48),
        Bar(bar_width=20),
        Percent(),
        text("{task.fields[eta]}"),
        TimeElapsedColumn(),
        text("{task.fields[metrics]}", overflow="ellipsis"),
        console=console,
        refresh_per_second=REFRESH_PER_SECOND,
        redirect_stdout=False,
        redirect_stderr=True,  # warnings logged meanwhile go above the line
    )
