"""The ask/tell trial runner: each trial is one training job, its metrics read from its log.

`TrialRunner.start(params)` creates the template's job for those parameters through a
`TrainingClient` (any backend) and returns a `Trial`. `Trial.metrics()` streams the primary
replica's `name=value` lines (trainop_core.report) while the job runs; `Trial.stop()` deletes
the job, which stops every replica; `Trial.result()` waits for the end. No Ray needed: the Ray
Tune front-end (trainop_hpo.tune) and any other search loop drive trials through this class.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from trainop_core.client import TrainingClient, failure_message, is_succeeded, primary_replica
from trainop_core.errors import NotFoundError, TrainopError
from trainop_core.report import MetricRecord, collect_metrics, collect_progress, parse_metrics
from trainop_hpo.template import (
    TemplateSource,
    read_template,
    template_dir,
    trial_job,
    trial_name,
)

SUCCEEDED, FAILED, STOPPED = "Succeeded", "Failed", "Stopped"
OUTPUT_TAIL_LINES = 3


@dataclass(frozen=True)
class TrialResult:
    """How a trial ended: Succeeded, Failed or Stopped, with the last value of every metric."""

    state: str
    metrics: dict[str, float] = field(default_factory=dict)
    job_name: str = ""
    reason: str = ""
    last_output: tuple[str, ...] = ()  # the primary replica's last lines, to explain a failure
    # The last progressPercentage / estimatedRemainingSeconds it printed (trainop_core.progress)
    progress: dict[str, int] = field(default_factory=dict)


class TrialRunner:
    """Starts trials of one job template on one client (default: a local-backend client).

    Trials' jobs go to `namespace`, else to the template's own, else to the client's default
    ("default", or the kubeconfig context's namespace on Kubernetes). Relative paths in the
    template resolve against the template file's directory, else against
    `workdir` (default: the current directory when the runner was made).
    """

    def __init__(
        self,
        template: TemplateSource,
        client: TrainingClient | None = None,
        namespace: str | None = None,
        *,
        workdir: str | Path | None = None,
    ) -> None:
        self.template = read_template(template)
        self.client = client if client is not None else TrainingClient("local")
        self.namespace = namespace
        self.workdir = Path(workdir or template_dir(template) or os.getcwd()).resolve()

    def job_name(self, trial_id: str) -> str:
        """The name the trial `trial_id`'s job gets. Pure."""
        return trial_name(self.template, trial_id)

    def start(self, params: Mapping[str, Any], trial_id: str | None = None) -> Trial:
        """Create the job for `params` (every placeholder filled, no parameter unused) and
        return its trial at once. Raises InvalidJobError before creating anything if the
        parameters do not fit the template, AlreadyExistsError if the trial id was used."""
        job = trial_job(self.template, params, trial_id or new_trial_id())
        created = self.client.create(job, namespace=self.namespace, workdir=self.workdir)
        return Trial(self.client, created.name, created.namespace, primary_replica(created))


class Trial:
    """One running trial's job. Use it as a context manager so that the job is always deleted."""

    def __init__(self, client: TrainingClient, name: str, namespace: str, primary: str) -> None:
        self.client = client
        self.job_name = name
        self.namespace = namespace
        self.primary = primary  # e.g. "master-0": the replica whose log carries the metrics
        self.latest: dict[str, float] = {}
        self._stopped: TrialResult | None = None

    def metrics(self) -> Iterator[MetricRecord]:
        """The primary replica's metric lines in order, as they are printed, until the job ends
        (or is stopped). Each record's values also update `latest`."""
        lines = self.client.logs(self.job_name, self.namespace, replica=self.primary, follow=True)
        with contextlib.suppress(NotFoundError):  # stopped meanwhile: the stream simply ends
            for line in lines:
                record = parse_metrics(line.text)
                if record is not None:
                    self.latest.update(record.values)
                    yield record

    def result(self, timeout: float | None = None) -> TrialResult:
        """Wait until the job finished (JobTimeoutError after `timeout` s; it keeps running) and
        say how it went; the job stays until `stop()` or the end of the `with` block."""
        if self._stopped is not None:
            return self._stopped
        job = self.client.wait(self.job_name, self.namespace, timeout)
        lines = [
            line.text for line in self.client.logs(self.job_name, self.namespace, self.primary)
        ]
        metrics, progress = collect_metrics(lines), collect_progress(lines)
        self.latest.update(metrics)
        if is_succeeded(job):
            return TrialResult(SUCCEEDED, metrics, self.job_name, progress=progress)
        tail = tuple(line for line in lines if line.strip())[-OUTPUT_TAIL_LINES:]
        reason = failure_message(job)
        return TrialResult(FAILED, metrics, self.job_name, reason, tail, progress)

    def stop(self, reason: str = "") -> TrialResult:
        """Delete the job: every replica is stopped, nothing of it is left. Idempotent."""
        self.delete()
        if self._stopped is None:
            self._stopped = TrialResult(STOPPED, dict(self.latest), self.job_name, reason)
        return self._stopped

    def delete(self) -> bool:
        """Delete the job if it still exists (whatever its state); True if it did."""
        return delete_job(self.client, self.job_name, self.namespace)

    def __enter__(self) -> Trial:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.delete()


def new_trial_id() -> str:
    """A short random id: 6 lowercase hex digits."""
    return secrets.token_hex(3)


def delete_job(client: TrainingClient, name: str, namespace: str | None) -> bool:
    """Delete a job if it exists; True if it did. Safe to call from several places at once."""
    try:
        client.delete(name, namespace)
    except NotFoundError:
        return False
    except (TrainopError, OSError):
        # Another deleter (the trial's own clean-up, Tune's callback) may have been half-way
        # through: fine if the job is gone now, else the error stands.
        if _exists(client, name, namespace):
            raise
        return False
    return True


def _exists(client: TrainingClient, name: str, namespace: str | None) -> bool:
    try:
        client.get(name, namespace)
    except NotFoundError:
        return False
    return True
