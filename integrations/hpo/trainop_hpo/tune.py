"""Ray Tune front-end: every trial of a Tune search is one training job of any kind.

Each trial is a function trainable that starts the template's job through `TrialRunner`,
reports each metric line of the primary replica with `ray.tune.report` (so a scheduler such as
ASHA can stop it early: the pending report then raises SystemExit and the trial's `with` block
deletes the job), and deletes the job when it ends. A driver-side `tune.Callback` deletes the
trial's job again when the trial completes or errors, and every trial's when the experiment ends
(a time budget or Ctrl-C ends trials without `on_trial_complete`), for the case where Ray ended
the trial's actor before its clean-up ran: the replicas are not the actor's children.

With the local backend the jobs run where the trial's actor runs and the driver deletes them
under its own TRAINOP_HOME (passed to the trials), so the Ray cluster must be this machine.
Importing this module imports Ray; `trainop_hpo` itself does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.experiment import Trial as TuneTrial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from trainop_core.client import TrainingClient
from trainop_core.errors import TrainopError
from trainop_hpo.results import STATE_KEY
from trainop_hpo.runner import FAILED, SUCCEEDED, Trial, TrialRunner, delete_job
from trainop_hpo.space import to_tune_space
from trainop_hpo.study import study_name, write_study_file
from trainop_hpo.template import (
    TemplateSource,
    check_parameters,
    read_template,
    template_dir,
    trial_name,
)

JOB_KEY = "job_name"
DEFAULT_STORAGE = Path("~/ray_results").expanduser()  # Ray Tune's own default storage path
# Where jobs live (TRAINOP_HOME, KUBECONFIG): trials and the driver's clean-up must agree.
DRIVER_ENV_PREFIXES = ("TRAINOP_", "KUBECONFIG")


class TrialJobFailed(TrainopError):
    """The trial's job ended Failed (or printed no objective metric); the trial errors."""


@dataclass(frozen=True)
class JobTrialSpec:
    """What a trial needs to run its job; picklable, shipped to each trial's Ray actor."""

    template: dict[str, Any]
    workdir: str
    metric: str
    namespace: str | None = None  # None: the template's, else the backend's default
    backend: str = "local"
    backend_options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the driver's, for the trial's process

    def client(self) -> TrainingClient:
        return TrainingClient(self.backend, **self.backend_options)

    def runner(self) -> TrialRunner:
        return TrialRunner(self.template, self.client(), self.namespace, workdir=self.workdir)

    def job_name(self, trial_id: str) -> str:
        return trial_name(self.template, trial_id)


def tune_job(
    template: TemplateSource,
    param_space: Mapping[str, Any],
    metric: str,
    mode: str = "min",
    num_samples: int = 1,
    scheduler: str | TrialScheduler | None = None,
    backend: str = "local",
    max_concurrent: int | None = None,
    resources_per_trial: Mapping[str, float] | None = None,
    time_budget_s: float | None = None,
    storage_path: str | Path | None = None,
    verbose: int = 0,
    *,
    stop: Mapping[str, Any] | tune.Stopper | None = None,
    namespace: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    callbacks: list[tune.Callback] | None = None,
    **tune_config_kwargs: Any,
) -> tune.ResultGrid:
    """Search `param_space` over jobs made from `template`; returns Ray Tune's ResultGrid.

    `param_space` maps each template parameter to a Ray Tune domain, a constant, or a string
    such as `loguniform:1e-4:1e-1` (trainop_hpo.space). `scheduler` is None (FIFO), "asha"
    (ASHAScheduler's defaults on `training_iteration`, one per metric line) or a Ray scheduler.
    The experiment is named `<template name>-<time>` and described for `trainop ui` in
    `trainop-study.json` next to Ray Tune's files (trainop_hpo.study), under `storage_path`
    (default ~/ray_results, Ray Tune's). `resources_per_trial` is what each trial's driver
    function reserves on the Ray cluster (default one CPU, so a 2-core machine runs two trials
    at a time; the function only waits on its job, so a fraction such as {"cpu": 0.25} is
    usually right). `stop` is Ray Tune's stop
    criteria or Stopper (`RunConfig(stop=...)`): either ends trials as the time budget does, and
    their jobs are deleted the same way. A trial whose job fails
    errors with the job's reason; the search goes on. Raises InvalidJobError before starting
    anything if the template and the parameters do not match.
    """
    spec = _trial_spec(template, param_space, metric, namespace, backend, backend_options)
    name = study_name(spec.template)
    storage = Path(storage_path).expanduser() if storage_path is not None else DEFAULT_STORAGE
    write_study_file(storage / name, metric, mode, spec.template, param_space, spec.namespace)
    trainable = tune.with_resources(_trainable(spec), dict(resources_per_trial or {"cpu": 1}))
    tuner = tune.Tuner(
        trainable,
        param_space=to_tune_space(param_space),
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            num_samples=num_samples,
            scheduler=_scheduler(scheduler),
            max_concurrent_trials=max_concurrent,
            time_budget_s=time_budget_s,
            **tune_config_kwargs,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            verbose=verbose,
            stop=stop,
            callbacks=[*(callbacks or []), JobCleanupCallback(spec)],
        ),
    )
    return tuner.fit()


def _trial_spec(
    template: TemplateSource,
    param_space: Mapping[str, Any],
    metric: str,
    namespace: str | None,
    backend: str,
    backend_options: Mapping[str, Any] | None,
) -> JobTrialSpec:
    data = read_template(template)
    check_parameters(data, param_space)  # InvalidJobError: missing or unused
    workdir = str(template_dir(template) or Path.cwd())
    options = dict(backend_options or {})
    if backend == "ray" and options.get("files", "upload") == "upload":
        options.setdefault("working_dir", _upload_once(workdir, options.get("upload_limits")))
    namespace = namespace or (data.get("metadata") or {}).get("namespace")
    env = {k: v for k, v in os.environ.items() if k.startswith(DRIVER_ENV_PREFIXES)}
    return JobTrialSpec(data, workdir, metric, namespace, backend, options, env)


def _upload_once(workdir: str, limits: Any = None) -> str:
    """Ray backend: the template's directory, uploaded once from the driver (trials run on
    other nodes, where it may not exist; bounded like every upload); every trial's job starts
    in that package."""
    from trainop_core.backends.ray.backend import connect, upload_directory

    connect(None, {})
    uri, _ = upload_directory(Path(workdir), limits)
    return uri


def _scheduler(scheduler: str | TrialScheduler | None) -> TrialScheduler | None:
    if scheduler is None or isinstance(scheduler, TrialScheduler):
        return scheduler
    if scheduler == "asha":
        return ASHAScheduler()
    if scheduler == "fifo":
        return None
    raise ValueError(f"scheduler {scheduler!r}: expected None, 'fifo', 'asha' or a Ray scheduler")


def _trainable(spec: JobTrialSpec) -> Any:
    def run_trial(config: dict[str, Any]) -> None:
        # Ray's workers have the environment of whoever started Ray, not the driver's now.
        os.environ.update(spec.env)
        trial_id = tune.get_context().get_trial_id()
        with spec.runner().start(config, trial_id=trial_id) as trial:
            stream_to_tune(trial, spec.metric)
            finish(trial, spec.metric)

    run_trial.__name__ = f"job_{spec.template.get('kind', 'job')}"  # Tune's trial names
    return run_trial


def stream_to_tune(trial: Trial, metric: str) -> None:
    """Report every metric line that carries `metric` (with the latest value of the others and
    of the trial's progress, `progressPercentage` and `estimatedRemainingSeconds`, once the
    primary replica printed them).

    Lines without the objective only update the others: Tune needs the metric in every result.
    `tune.report` blocks until the driver took the result and raises SystemExit when the
    scheduler stops the trial."""
    latest: dict[str, Any] = {}
    for record in trial.metrics():
        latest.update(record.values)
        latest.update(record.progress())
        if metric in record.values:
            step = {} if record.step is None else {"step": record.step}
            tune.report({**latest, **step, JOB_KEY: trial.job_name})


def finish(trial: Trial, metric: str) -> None:
    """Raise TrialJobFailed if the job failed or never printed `metric`, else report the final
    metrics once more marked Succeeded (how a trial that ran to the end is told apart)."""
    result = trial.result()
    if result.state == FAILED:
        said = " | ".join(result.last_output)
        output = f" (last output of {trial.primary}: {said})" if said else ""
        raise TrialJobFailed(f"job {result.job_name} failed: {result.reason}{output}")
    if metric not in result.metrics:
        printed = ", ".join(sorted(result.metrics)) or "none"
        raise TrialJobFailed(
            f"job {result.job_name} succeeded but its primary replica ({trial.primary}) never "
            f"printed {metric}=<value> (metrics printed: {printed})"
        )
    final = {**result.metrics, **result.progress}
    tune.report({**final, JOB_KEY: result.job_name, STATE_KEY: SUCCEEDED})


class JobCleanupCallback(tune.Callback):
    """Deletes trials' jobs on the driver, a safety net behind each trial's own clean-up: when a
    trial completes or errors, and for every trial when the experiment ends (a time budget or
    Ctrl-C stops the trials without `on_trial_complete`, and their actors may be ended before
    their own clean-up ran)."""

    def __init__(self, spec: JobTrialSpec) -> None:
        self.spec = spec
        self._client: TrainingClient | None = None
        self.deleted: list[str] = []  # jobs this callback found still there and deleted

    def on_trial_complete(
        self, iteration: int, trials: list[TuneTrial], trial: TuneTrial, **info: Any
    ) -> None:
        self._delete(trial)

    def on_trial_error(
        self, iteration: int, trials: list[TuneTrial], trial: TuneTrial, **info: Any
    ) -> None:
        self._delete(trial)

    def on_experiment_end(self, trials: list[TuneTrial], **info: Any) -> None:
        for trial in trials:
            self._delete(trial)

    def _delete(self, trial: TuneTrial) -> None:
        if self._client is None:
            self._client = self.spec.client()
        name = self.spec.job_name(trial.trial_id)
        if delete_job(self._client, name, self.spec.namespace):
            self.deleted.append(name)
