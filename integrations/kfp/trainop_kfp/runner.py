"""What the KFP components do, as plain functions: submit a job, follow it, report, clean up.

`run_job` is the whole behaviour and needs no kfp: it prepares the job (KFP's floats back to ints,
pipeline-task settings merged into the pod templates), creates it through `TrainingClient`,
streams the primary replica's lines, waits, and reads the metrics the primary printed. It raises
`TrainingJobFailed` (with `trainop_core.failure_message`) and `JobTimeoutError`; on a timeout, or
when SIGTERM arrives (the pipeline run was cancelled), the job is deleted first.
`run_component` adapts it to the component's inputs and outputs.
"""

from __future__ import annotations

import contextlib
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from trainop_core.api.job import TrainingJob
from trainop_core.client import (
    TrainingClient,
    failure_message,
    is_succeeded,
    job_state,
    primary_replica,
)
from trainop_core.errors import InvalidJobError, JobTimeoutError, Problem, TrainopError
from trainop_core.report import collect_metrics, collect_progress
from trainop_core.templating import substitute
from trainop_kfp.coerce import coerce_ints
from trainop_kfp.passthrough import PodSettings, apply_pod_settings

Echo = Callable[[str], None]
LOG_DRAIN_SECONDS = 10.0  # after the job finished, how long the log stream may take to drain
FAILURE_TAIL_LINES = 10


@dataclass(frozen=True)
class JobResult:
    """How a job ended: its final state, the metrics its primary replica printed, the message of
    its last condition (the reason when it Failed)."""

    name: str
    namespace: str
    state: str
    metrics: dict[str, float] = field(default_factory=dict)
    message: str = ""
    last_lines: tuple[str, ...] = ()  # the primary replica's last lines, for failure reports
    # The last progressPercentage / estimatedRemainingSeconds it printed (trainop_core.progress)
    progress: dict[str, int] = field(default_factory=dict)


class TrainingJobFailed(TrainopError):
    """The job ended Failed; the message carries the job's own reason."""

    def __init__(self, result: JobResult) -> None:
        self.result = result
        reason = result.message or "no reason recorded"
        text = f"job {result.namespace}/{result.name} {result.state}: {reason}"
        if result.last_lines:
            text += "\nlast lines of its primary replica:\n" + "\n".join(result.last_lines)
        super().__init__(text)


class Terminated(BaseException):
    """SIGTERM arrived (the pipeline run was cancelled). A BaseException, like KeyboardInterrupt,
    so that no `except Exception` on the way swallows it."""


def load_job_text(job: Mapping[str, Any] | str) -> dict[str, Any]:
    """The job as a dict: a mapping as given, or parsed from YAML/JSON text (one document)."""
    if isinstance(job, Mapping):
        return dict(job)
    from trainop_core.api.load import parse_text

    docs = [d.data for d in parse_text(job, "")]  # bounded like every job source
    if len(docs) != 1 or not isinstance(docs[0], dict):
        found = f"{len(docs)} documents" if len(docs) != 1 else "not a mapping"
        raise InvalidJobError([Problem("", f"expected exactly one job, found {found}")])
    return docs[0]


def prepare_job(
    job: Mapping[str, Any] | str, settings: PodSettings | None = None
) -> dict[str, Any]:
    """The job in wire form, ready for `TrainingClient.create`: integral floats back to ints where
    the kind's model wants ints, and `settings` merged into every replica's pod template (a
    TrainJob's: see `trainop_kfp.trainjob`). A job of an unknown kind is returned as it is, for
    `create` to report."""
    from trainop_core.api.load import default_registry
    from trainop_core.api.trainjob_validation import is_v2

    data = load_job_text(job)
    if is_v2(data):  # a TrainJob: settings where its author would put them
        from trainop_kfp.trainjob import prepare_trainjob

        return prepare_trainjob(data, settings)
    try:
        kind = default_registry().get(str(data.get("kind")))
    except (LookupError, TrainopError):
        return data
    if settings is not None:
        data = apply_pod_settings(data, settings, kind.replica_field, kind.default_container)
    coerced: dict[str, Any] = coerce_ints(data, kind.job_model)
    return coerced


def run_job(
    job: Mapping[str, Any] | str,
    *,
    client: TrainingClient | None = None,
    backend: str = "local",
    namespace: str | None = None,
    timeout_seconds: float | None = None,
    delete_after: bool = True,
    settings: PodSettings | None = None,
    workdir: str | Path | None = None,
    echo: Echo = print,
) -> JobResult:
    """Run one job to its end and return how it ended.

    Raises InvalidJobError (nothing created), TrainingJobFailed, JobTimeoutError (job deleted)
    and Terminated on SIGTERM (job deleted; the handler is only installed in the main thread).
    `workdir` is where relative paths in the job resolve on the local backend (default: cwd).
    """
    client = client or TrainingClient(backend)
    prepared = prepare_job(job, settings)
    with _sigterm_raises():
        with _sigterm_deferred() as deferred:  # until we know the job's identity
            created = _create(client, prepared, namespace or None, workdir)
        echo(f"trainop: {created.kind} {created.key} created")
        try:
            if deferred:
                raise Terminated(f"received signal {deferred[0]} while creating the job")
            result = _follow(client, created, timeout_seconds, echo)
        except BaseException:
            with _sigterm_ignored():
                _delete(client, created, echo)
            raise
        if delete_after:
            with _sigterm_ignored():  # the job has finished: cancelling now changes nothing
                _delete(client, created, echo)
    if result.state != "Succeeded":
        raise TrainingJobFailed(result)
    return result


def render_template(template: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A job template (YAML text with `${trialParameters.NAME}`s) filled with `params`."""
    filled: dict[str, Any] = substitute(load_job_text(template), params)
    return filled


# --- steps ---------------------------------------------------------------------------------------
def _create(
    client: TrainingClient, job: dict[str, Any], namespace: str | None, workdir: str | Path | None
) -> TrainingJob:
    return client.create(job, namespace=namespace, workdir=workdir or None)


def _follow(
    client: TrainingClient, job: TrainingJob, timeout: float | None, echo: Echo
) -> JobResult:
    lines: list[str] = []
    pump = threading.Thread(
        target=_pump_logs, args=(client, job, lines, echo), daemon=True, name="trainop-logs"
    )
    pump.start()
    try:
        finished = client.wait(job.name, job.namespace, timeout)
    except JobTimeoutError:
        raise JobTimeoutError(
            f"job {job.key} did not finish within {timeout:g} s; it was deleted"
        ) from None
    pump.join(LOG_DRAIN_SECONDS)
    return JobResult(
        name=job.name,
        namespace=job.namespace,
        state=job_state(finished),
        metrics=collect_metrics(list(lines)),
        message=_last_message(finished),
        last_lines=tuple(lines[-FAILURE_TAIL_LINES:]),
        progress=collect_progress(list(lines)),
    )


def _pump_logs(client: TrainingClient, job: TrainingJob, lines: list[str], echo: Echo) -> None:
    replica = primary_replica(job)
    try:
        for line in client.logs(job.name, job.namespace, replica=replica, follow=True):
            lines.append(line.text)
            echo(f"{line.replica} | {line.text}")
    except (TrainopError, OSError):
        return  # the job was deleted under us; the waiting side reports why


def _last_message(job: TrainingJob) -> str:
    if is_succeeded(job):
        conditions = job.status.conditions if job.status else []
        return next((c.message or "" for c in reversed(conditions)), "")
    return failure_message(job)


def _delete(client: TrainingClient, job: TrainingJob, echo: Echo) -> None:
    with contextlib.suppress(TrainopError):
        client.delete(job.name, job.namespace)
        echo(f"trainop: {job.kind} {job.key} deleted")


# --- signals -------------------------------------------------------------------------------------
def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"received signal {signum}")


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    with _sigterm_handler(_raise_terminated):
        yield


@contextlib.contextmanager
def _sigterm_deferred() -> Iterator[list[int]]:
    """SIGTERMs are recorded in the yielded list instead of raised."""
    received: list[int] = []
    with _sigterm_handler(lambda signum, frame: received.append(signum)):
        yield received


@contextlib.contextmanager
def _sigterm_ignored() -> Iterator[None]:
    with _sigterm_handler(signal.SIG_IGN):
        yield


@contextlib.contextmanager
def _sigterm_handler(handler: Any) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- the components' body ------------------------------------------------------------------------
def run_component(
    *,
    metrics: Any,
    task_config: Any = None,
    job: Mapping[str, Any] | None = None,
    job_yaml: str = "",
    template: str = "",
    params: Mapping[str, Any] | None = None,
    backend: str = "kubernetes",
    namespace: str = "",
    timeout_seconds: float = 0,
    delete_after: bool = True,
    workdir: str = "",
) -> tuple[str, str]:
    """The body of the KFP components: the job from exactly one of `job`, `job_yaml` or
    `template` + `params`; metrics logged to `metrics` (a `dsl.Metrics`), with the last
    progress the primary replica reported (`progressPercentage`, `estimatedRemainingSeconds`);
    returns (state, name). A SIGTERM ends the process with status 143 once the job is
    deleted."""
    source = _one_source(job, job_yaml, template, params or {})
    try:
        result = run_job(
            source,
            backend=backend,
            namespace=namespace or None,
            timeout_seconds=timeout_seconds if timeout_seconds and timeout_seconds > 0 else None,
            delete_after=delete_after,
            settings=PodSettings.from_task_config(task_config),
            workdir=workdir or None,
        )
    except Terminated:
        print("trainop: terminated (SIGTERM): the job was deleted", flush=True)
        raise SystemExit(128 + signal.SIGTERM) from None
    for name, value in sorted({**result.metrics, **result.progress}.items()):
        metrics.log_metric(name, value)
    return result.state, result.name


def run_cli(*, job_yaml: str, backend: str, namespace: str, timeout_seconds: int) -> None:
    """The body of `trainop_run`: `trainop run FILE --rm` in this process, the job text in a
    temporary FILE. Returns when the job Succeeded; else SystemExit with trainop run's exit code
    (1 Failed, 2 invalid, 124 timeout, 143 SIGTERM). `timeout_seconds` <= 0 means no limit."""
    from trainop_core.cli.main import main

    with tempfile.TemporaryDirectory(prefix="trainop-run-") as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_text(job_yaml)
        argv = ["run", str(path), "--rm", "--backend", backend]
        if namespace:
            argv += ["--namespace", namespace]
        if timeout_seconds and timeout_seconds > 0:
            argv += ["--timeout", str(timeout_seconds)]
        code = main(argv)
    if code != 0:
        raise SystemExit(code)


def _one_source(
    job: Mapping[str, Any] | None, job_yaml: str, template: str, params: Mapping[str, Any]
) -> Mapping[str, Any] | str:
    given = [s for s in (job, job_yaml, template) if s]
    if len(given) != 1:
        problem = Problem("job", f"give exactly one of job (a dict) or job_yaml, got {len(given)}")
        raise InvalidJobError([problem])
    if template:
        return render_template(template, params)
    return given[0]
