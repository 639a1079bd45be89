"""`trainop run FILE`: start a job, stream its replicas' logs and progress, wait for the end.

Exit codes: 0 Succeeded, 1 Failed, 2 invalid input (nothing started), 124 --timeout expired,
130 Ctrl-C (SIGINT), 143 SIGTERM. On 124/130/143 every replica has been stopped and the job is
recorded Failed with the reason as its message; it stays (inspect it) until `trainop delete`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from trainop_core.cli._output import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    add_backend_options,
    make_client,
    replica_detail,
    report_error,
    resource,
    setup_logging,
)
from trainop_core.errors import JobTimeoutError, TrainopError

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob
    from trainop_core.client import TrainingClient

STATUS_SLICE_SECONDS = 0.5  # how often the progress line is refreshed


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run a job and follow it to the end",
        description=(
            "Validate FILE (one TFJob, PyTorchJob, MXJob or XGBoostJob), start it, stream every "
            "replica's output prefixed `master-0 | ...` on stdout and its progress on stderr "
            "(a refreshing line on a terminal, a line per change otherwise), and wait until it "
            "Succeeded or Failed. Exit codes: 0 Succeeded, 1 Failed, 2 invalid input (nothing "
            "was started), 124 --timeout expired, 130 interrupted (Ctrl-C), 143 terminated "
            "(SIGTERM); in the last three cases every replica is stopped and the job is recorded "
            "Failed, and it stays until `trainop delete`."
        ),
    )
    parser.add_argument(
        "file", help="the job's YAML or JSON file, or - to read it from standard input"
    )
    parser.add_argument(
        "--rm",
        action="store_true",
        help="delete the job when the run ends, however it ends (its logs go with it)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop the job (exit 124) if it has not finished after SECONDS",
    )
    add_backend_options(parser, namespace_help="create the job in this namespace")
    parser.set_defaults(func=run)


class _Terminated(Exception):
    """SIGTERM arrived while following the job."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        client = make_client(args)
        job = client.create(_source(args.file), namespace=args.namespace)
    except TrainopError as err:
        return report_error(err)
    print(f"{resource(job.kind)}/{job.name} created", file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _Follower(client, job, args.timeout).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.rm:
            _remove(client, job)


def _source(file: str) -> str | Path:
    """The job file's path, or the job text itself for `-` (relative paths then resolve in the
    current directory)."""
    return sys.stdin.read() if file == "-" else Path(file)


def _remove(client: TrainingClient, job: TrainingJob) -> None:
    try:
        client.delete(job.name, job.namespace)
    except TrainopError as err:  # already gone (e.g. its TTL expired): nothing left to remove
        print(f"trainop: {err}", file=sys.stderr)
    else:
        print(f'{resource(job.kind)} "{job.name}" deleted', file=sys.stderr, flush=True)


class _Follower:
    """Streams logs (a thread) while the main thread watches status and handles interruptions."""

    def __init__(self, client: TrainingClient, job: TrainingJob, timeout: float | None) -> None:
        self.client = client
        self.name, self.namespace = job.name, job.namespace
        self.label = f"{resource(job.kind)}/{job.name}"
        self.timeout = timeout
        self.started = time.monotonic()
        self.err: TextIO = sys.stderr
        self.tty = self.err.isatty()
        self.lock = threading.Lock()
        self.status = ""

    def run(self) -> int:
        pump = threading.Thread(target=self._pump_logs, daemon=True)
        pump.start()
        try:
            job = self._watch()
        except KeyboardInterrupt:
            return self._stop("stopped by user (SIGINT)", 130)
        except _Terminated:
            return self._stop("stopped by user (SIGTERM)", 143)
        except JobTimeoutError:
            return self._stop(f"stopped: --timeout {self.timeout:g} s expired", EXIT_TIMEOUT)
        pump.join(timeout=5)
        return self._finish(job)

    def _watch(self) -> TrainingJob:
        while True:
            try:
                return self.client.wait(self.name, self.namespace, STATUS_SLICE_SECONDS, poll=0.05)
            except JobTimeoutError:
                self._show(self.client.get(self.name, self.namespace))
            if self.timeout is not None and self._elapsed() >= self.timeout:
                raise JobTimeoutError(f"{self.label} did not finish within {self.timeout:g} s")

    def _stop(self, reason: str, code: int) -> int:
        self._say(f"{self.label}: {reason}; stopping every replica ...")
        self.client.stop(self.name, self.namespace, reason)
        self._finish(self.client.get(self.name, self.namespace))
        return code

    def _finish(self, job: TrainingJob) -> int:
        from trainop_core.client import is_succeeded, job_state

        conditions = job.status.conditions if job.status else []
        message = next((c.message for c in reversed(conditions) if c.message), "")
        summary = f"{self.label} {job_state(job)} after {self._elapsed():.1f}s"
        self._say(f"{summary}: {message}" if message and not is_succeeded(job) else summary)
        return EXIT_OK if is_succeeded(job) else EXIT_FAILED

    # --- output ---------------------------------------------------------------------------------
    def _pump_logs(self) -> None:
        try:
            for line in self.client.logs(self.name, self.namespace, follow=True):
                with self.lock:
                    self._clear()
                    print(f"{line.replica} | {line.text}", flush=True)
                    self._redraw()
        except TrainopError:
            return  # the job was deleted under us; the watcher reports it

    def _show(self, job: TrainingJob) -> None:
        from trainop_core.client import job_state

        status = f"{self.label}: {job_state(job)} | {replica_detail(job)}"
        with self.lock:
            if self.tty:
                self.status = f"{status} | {self._elapsed():.0f}s"
                self._clear()
                self._redraw()
            elif status != self.status:
                self.status = status
                print(f"{status} | {self._elapsed():.1f}s", file=self.err, flush=True)

    def _say(self, text: str) -> None:
        with self.lock:
            self._clear()
            self.status = ""
            print(text, file=self.err, flush=True)

    def _clear(self) -> None:
        if self.tty and self.status:
            self.err.write("\r\033[K")

    def _redraw(self) -> None:
        if self.tty and self.status:
            self.err.write(self.status[:200])
            self.err.flush()

    def _elapsed(self) -> float:
        return time.monotonic() - self.started
