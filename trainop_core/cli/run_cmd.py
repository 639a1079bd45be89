"""`trainop run FILE`: start a job, stream its replicas' logs and progress, wait for the end.

Exit codes: 0 Succeeded, 1 Failed, 2 invalid input (nothing started), 124 --timeout expired,
130 Ctrl-C (SIGINT), 143 SIGTERM. On 124/130/143 every replica has been stopped and the job is
recorded Failed with the reason as its message; it stays (inspect it) until `trainop delete`.
A job deleted under the run (`trainop delete`, its TTL) ends it too: everything the replicas
wrote is printed, and the exit code is the job's last known state (1 if it had not finished).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from trainop_core.cli._output import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    add_backend_options,
    add_runtimes_option,
    display_state,
    make_client,
    replica_detail,
    report_error,
    resource,
    setup_logging,
)
from trainop_core.errors import (
    DamagedJobError,
    InvalidJobError,
    JobTimeoutError,
    NotFoundError,
    Problem,
    TrainopError,
)

if TYPE_CHECKING:
    from trainop_core.api.job import TrainingJob
    from trainop_core.client import TrainingClient

STATUS_SLICE_SECONDS = 0.5  # how often the job's state is read for the status line


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run a job and follow it to the end",
        description=(
            "Validate FILE (one job of any kind: TFJob, MPIJob, ..., or a Kubeflow Trainer v2 "
            "TrainJob, run with its runtime from --runtimes or the defaults, or on --backend "
            "kubernetes the cluster's), start it, stream "
            "every replica's output prefixed `master-0 | ...` on stdout and its state on stderr, "
            "with the progress its primary replica reports (progressPercentage=, "
            "estimatedRemainingSeconds= and name=value lines: see docs/progress.md): a live "
            "line with a progress bar and the newest metrics on a terminal; elsewhere a line "
            "per change of state, and progress at most every 10 s. Wait until it "
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
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="stop the job (exit 124) if it has not finished after SECONDS",
    )
    add_runtimes_option(parser)
    add_backend_options(parser, namespace_help="create the job in this namespace", decorators=True)
    parser.set_defaults(func=run)


def seconds(text: str) -> float:
    """A --timeout: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < float("inf")):  # also false for nan
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


class _Terminated(Exception):
    """SIGTERM arrived while following the job."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    setup_logging()
    try:
        client = make_client(args)
        source, workdir = _source(args.file)
        job = client.create(
            source, namespace=args.namespace, workdir=workdir, runtimes=args.runtimes
        )
    except TrainopError as err:
        return report_error(err)
    print(f"{resource(job.kind)}/{job.name} created", file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        code = _Follower(client, job, args.timeout).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        removed = _remove(client, job) if args.rm else True
    return code if removed or code != EXIT_OK else EXIT_FAILED  # --rm did not do its part


def _source(file: str) -> tuple[Path | Mapping[str, Any], Path | None]:
    """The job file's path, or for `-` the one job read from standard input (at most the size
    any job source may have; relative paths then resolve in the current directory)."""
    if file != "-":
        return Path(file), None
    from trainop_core.api.load import parse_text
    from trainop_core.api.reader import read_stream

    origin = "standard input"
    docs = parse_text(read_stream(sys.stdin, origin), origin)
    if len(docs) != 1 or not isinstance(docs[0].data, Mapping):
        found = "it is empty" if not docs else f"found {len(docs)} documents"
        if len(docs) == 1:
            found = "found no mapping with apiVersion, kind, metadata and spec"
        raise InvalidJobError([Problem("", f"expected exactly one job; {found}")], source=origin)
    return docs[0].data, Path.cwd()


def _remove(client: TrainingClient, job: TrainingJob) -> bool:
    """Delete the job for --rm; False if it is still there (the reason is printed)."""
    try:
        client.delete(job.name, job.namespace)
    except NotFoundError as err:  # already gone (e.g. its TTL expired): nothing left to remove
        print(f"trainop: {err}", file=sys.stderr)
    except TrainopError as err:
        print(f"trainop: the job was not removed: {err}", file=sys.stderr)
        return False
    else:
        print(f'{resource(job.kind)} "{job.name}" deleted', file=sys.stderr, flush=True)
    return True


class _Follower:
    """Streams logs (a thread) while the main thread watches status and handles interruptions."""

    def __init__(self, client: TrainingClient, job: TrainingJob, timeout: float | None) -> None:
        from trainop_core.cli._display import display_for
        from trainop_core.client import primary_replica
        from trainop_core.progress import ProgressTracker

        self.client = client
        self.name, self.namespace = job.name, job.namespace
        self.label = f"{resource(job.kind)}/{job.name}"
        self.timeout = timeout
        self.started = time.monotonic()
        self.display = display_for(sys.stderr)
        self.primary = primary_replica(job)  # whose lines carry the progress
        self.progress = ProgressTracker()
        self.lock = threading.Lock()  # the tracker: fed by the log thread, read by the watcher
        self.last: TrainingJob = job  # the newest state seen, for a job deleted under us
        self.attached = threading.Event()  # the log stream is open (it outlives a deletion)
        self.said_suspended = False

    def run(self) -> int:
        try:
            return self._run()
        finally:
            self.display.close()

    def _run(self) -> int:
        pump = threading.Thread(target=self._pump_logs, daemon=True)
        pump.start()
        self.attached.wait(timeout=30)
        try:
            job = self._watch()
        except KeyboardInterrupt:
            return self._stop("stopped by user (SIGINT)", 130)
        except _Terminated:
            return self._stop("stopped by user (SIGTERM)", 143)
        except JobTimeoutError:
            return self._stop(f"stopped: --timeout {self.timeout:g} s expired", EXIT_TIMEOUT)
        except NotFoundError:
            pump.join(timeout=30)
            return self._deleted()
        except DamagedJobError as err:
            pump.join(timeout=5)
            self._say(f"{self.label}: {err}")
            return EXIT_FAILED
        pump.join(timeout=30)
        return self._finish(job)

    def _watch(self) -> TrainingJob:
        while True:
            try:
                return self.client.wait(self.name, self.namespace, STATUS_SLICE_SECONDS, poll=0.05)
            except JobTimeoutError:
                self.last = self.client.get(self.name, self.namespace)
                self._show(self.last)
            if self.timeout is not None and self._elapsed() >= self.timeout:
                raise JobTimeoutError(f"{self.label} did not finish within {self.timeout:g} s")

    def _stop(self, reason: str, code: int) -> int:
        self._say(f"{self.label}: {reason}; stopping every replica ...")
        try:
            self.client.stop(self.name, self.namespace, reason)
            self._finish(self.client.get(self.name, self.namespace))
        except NotFoundError:
            self._say(f"{self.label} was deleted")
        return code

    def _deleted(self) -> int:
        """The job was deleted before we saw it finish: say so; its last state decides."""
        from trainop_core.client import is_finished, job_state

        if is_finished(self.last):
            return self._finish(self.last)
        self._say(f"{self.label} was deleted while {job_state(self.last)}")
        return EXIT_FAILED

    def _finish(self, job: TrainingJob) -> int:
        from trainop_core.client import is_succeeded

        conditions = job.status.conditions if job.status else []
        message = next((c.message for c in reversed(conditions) if c.message), "")
        summary = f"{self.label} {display_state(job)} after {self._elapsed():.1f}s"
        with self.lock:
            progress = self.progress.status()
        if progress is not None:
            summary += f" | {progress.summary()}"
        self.display.close()  # the last state stays drawn, the summary comes below it
        self._say(f"{summary}: {message}" if message and not is_succeeded(job) else summary)
        return EXIT_OK if is_succeeded(job) else EXIT_FAILED

    # --- output ---------------------------------------------------------------------------------
    def _pump_logs(self) -> None:
        try:
            lines = self.client.logs(self.name, self.namespace, follow=True)
            self.attached.set()
            for line in lines:
                self.display.log(f"{line.replica} | {line.text}")
                if line.replica == self.primary:
                    with self.lock:
                        self.progress.feed(line.text)
        except TrainopError:
            return  # the job was deleted under us; the watcher reports it
        finally:
            self.attached.set()

    def _show(self, job: TrainingJob) -> None:
        if display_state(job) == "Suspended" or job.spec.run_policy.suspend:
            self._say_suspended()
        with self.lock:
            progress = self.progress.status()
        state, detail = display_state(job), replica_detail(job)
        self.display.show(self.label, state, detail, progress, self._elapsed())

    def _say_suspended(self) -> None:
        if not self.said_suspended:
            self.said_suspended = True
            self._say(
                f"{self.label} is suspended (spec.runPolicy.suspend: true): no replica runs "
                "until it is resumed; waiting (Ctrl-C stops the job)"
            )

    def _say(self, text: str) -> None:
        self.display.say(text)

    def _elapsed(self) -> float:
        return time.monotonic() - self.started
