"""Ray Tune searches on a real local Ray (2 CPUs) whose every trial is a real local job.

One ASHA grid search is shared by the first tests: a grid over lr whose best value follows from
the loss formula the script prints, with one value that makes the job fail.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from builders import make_job
from hpo_support import TAG, leftovers, quadratic_loss, quadratic_template
from trainop_hpo import TrialSummary, summarize

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient

pytestmark = pytest.mark.slow
tune = pytest.importorskip("ray.tune")

# Not a rung: ASHA (grace 1, reduction 2, max_t 100) judges trials at steps 1, 2, 4, 8, ...; a
# trial judged at its very last step can be stopped as it finishes, so no rung may equal STEPS.
STEPS = 6
# Good values first: ASHA keeps the first trials to reach a rung and stops later, worse ones.
GRID = [0.01, 0.003, 0.03, 0.001, 0.1, 0.3, -1.0]  # -1: the script exits 1, the job fails


@dataclass(frozen=True)
class Search:
    grid: tune.ResultGrid
    summaries: list[TrialSummary]
    tag: str
    seconds: float


@pytest.fixture(scope="module")
def asha_search(local_ray: None, tmp_path_factory: pytest.TempPathFactory) -> Search:
    from trainop_hpo import tune_job

    tag = uuid.uuid4().hex
    started = time.monotonic()
    grid = tune_job(
        quadratic_template(tag, steps=STEPS, sleep=0.15),
        {"lr": tune.grid_search(GRID)},
        metric="loss",
        mode="min",
        # max_t above the job's steps: a trial ASHA keeps runs its job to the end (Succeeded).
        scheduler=tune.schedulers.ASHAScheduler(grace_period=1, reduction_factor=2),
        max_concurrent=2,
        resources_per_trial={"cpu": 0.5},
        storage_path=tmp_path_factory.mktemp("tune"),
        namespace="asha",
    )
    seconds = time.monotonic() - started
    return Search(grid, summarize(grid, "loss", "min"), tag, seconds)


def by_lr(search: Search) -> dict[float, TrialSummary]:
    return {row.params["lr"]: row for row in search.summaries}


def test_the_best_trial_has_the_lr_the_loss_formula_favours(asha_search: Search) -> None:
    expected = min((lr for lr in GRID if lr >= 0), key=lambda lr: quadratic_loss(lr, STEPS))
    best = [row for row in asha_search.summaries if row.best]
    assert [row.params for row in best] == [{"lr": expected}]
    assert best[0].state == "Succeeded"
    assert best[0].metric == pytest.approx(quadratic_loss(expected, STEPS))
    best_result = asha_search.grid.get_best_result()
    assert best_result.config == {"lr": expected}
    assert best_result.metrics["progressPercentage"] == 100  # the trial's progress, reported


def test_asha_stops_some_trials_early_and_leaves_no_job_or_process(
    asha_search: Search, ray_home: Path
) -> None:
    stopped = [row for row in asha_search.summaries if row.state == "Stopped"]
    assert stopped, f"ASHA stopped no trial: {asha_search.summaries}"
    last_step = {r.config["lr"]: r.metrics.get("step") for r in asha_search.grid}
    assert all(last_step[row.params["lr"]] < STEPS for row in stopped), last_step
    assert all(row.metric is not None for row in stopped)
    assert TrainingClient(LocalBackend(home=ray_home)).list("asha") == []
    assert leftovers(asha_search.tag, ray_home) == []


def test_a_trial_whose_job_fails_errors_with_the_reason_and_the_search_goes_on(
    asha_search: Search,
) -> None:
    failed = by_lr(asha_search)[-1.0]
    assert failed.state == "Failed"
    assert "Master replica(s) failed" in failed.reason
    assert "--lr must not be negative" in failed.reason
    assert len(asha_search.summaries) == len(GRID)
    assert [row.params["lr"] for row in asha_search.summaries if row.state == "Failed"] == [-1.0]
    assert asha_search.seconds < 180


class AfterTheFirstResult(tune.Stopper):
    """Ends the whole experiment, by the path a time budget takes (`stop_all`), once a trial has
    reported: an event instead of a deadline that a loaded machine may miss."""

    def __init__(self) -> None:
        self.reported = False

    def __call__(self, trial_id: str, result: dict[str, object]) -> bool:
        self.reported = True
        return False  # not this trial alone: the experiment

    def stop_all(self) -> bool:
        return self.reported


def test_a_trial_ray_ends_while_its_job_is_silent_still_has_its_job_deleted(
    local_ray: None, ray_home: Path, tmp_path: Path
) -> None:
    from trainop_hpo import tune_job

    # The job prints one metric line and then sleeps: when the experiment ends (as a time budget
    # ends it, but once that line has arrived, however loaded the machine), the trial's function
    # is not inside tune.report, Ray ends the actor, and only the driver-side callback can delete
    # the job (its replicas are not the actor's children).
    tag = uuid.uuid4().hex
    code = "import time; print('loss=1', flush=True); time.sleep(300)"
    template = (
        make_job("XGBoostJob", "silent")
        .master(restart_policy="Never")
        .workers(1, restart_policy="Never")
        .command(["python", "-c", code])
        .env("Master", **{TAG: tag, "LR": "${trialParameters.lr}"})
        .env("Worker", **{TAG: tag})
        .build()
    )
    grid = tune_job(
        template,
        {"lr": 0.1},
        "loss",
        stop=AfterTheFirstResult(),
        resources_per_trial={"cpu": 0.5},
        storage_path=tmp_path,
        namespace="silent",
    )
    assert [r.metrics["loss"] for r in grid] == [1]
    assert TrainingClient(LocalBackend(home=ray_home)).list("silent") == []
    assert leftovers(tag, ray_home) == []
