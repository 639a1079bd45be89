"""trainop for hyperparameter search: every trial is a training job of any kind.

- `TrialRunner(template).start(params) -> Trial`: the ask/tell core, no Ray needed. A template is
  a job (TFJob, PyTorchJob, MPIJob, XGBoostJob, ...) using `${trialParameters.NAME}`; the trial's
  primary replica prints `name=value` metric lines (trainop_core.report).
- `tune_job(template, param_space, metric, mode, ...)`: a Ray Tune search over such jobs
  (the `ray` extra), with ASHA early stopping and no job left behind.
- `katib_experiment(...)` / `katib_experiment_yaml(...)`: the same search as a Katib Experiment
  (`katib_notes(...)`: where Katib behaves differently; `SearchError` when it cannot).
- `list_studies(root)`, `find_study(root, name)`, `read_study(info)`: the searches `tune_job`
  stored (Ray Tune's experiment directories it described), read back with their trials.
- `parse_params(["lr=loguniform:1e-4:1e-1", ...])`: search spaces written as strings;
  `read_template(path)` and `check_parameters(template, names)` check a template against them.
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use, so that `import trainop_hpo` needs no Ray (only `tune_job` does).
_EXPORTS = {
    "JobCleanupCallback": "trainop_hpo.tune",
    "ParamSpec": "trainop_hpo.space",
    "SearchError": "trainop_hpo.katib_search",
    "Study": "trainop_hpo.study",
    "StudyInfo": "trainop_hpo.study",
    "StudyTrial": "trainop_hpo.study",
    "SpaceError": "trainop_hpo.space",
    "Trial": "trainop_hpo.runner",
    "TrialJobFailed": "trainop_hpo.tune",
    "TrialResult": "trainop_hpo.runner",
    "TrialRunner": "trainop_hpo.runner",
    "TrialSummary": "trainop_hpo.results",
    "check_parameters": "trainop_hpo.template",
    "katib_experiment": "trainop_hpo.katib",
    "katib_experiment_yaml": "trainop_hpo.katib",
    "katib_notes": "trainop_hpo.katib",
    "parse_param": "trainop_hpo.space",
    "parse_params": "trainop_hpo.space",
    "find_study": "trainop_hpo.study",
    "list_studies": "trainop_hpo.study",
    "read_study": "trainop_hpo.study",
    "read_template": "trainop_hpo.template",
    "summarize": "trainop_hpo.results",
    "tune_job": "trainop_hpo.tune",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainop_hpo' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
