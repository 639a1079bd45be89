"""trainop for Kubeflow Pipelines: components that run Kubeflow training jobs of every kind.

- `run_training_job`: lightweight Python component; submits a job through `TrainingClient`,
  streams the primary replica's output, returns `state` and `name` and a `metrics` artifact, and
  fails when the job Failed or timed out. Pipeline-task resources, env, tolerations, node
  selectors, affinity and volumes pass through to every replica.
- `trainop_run`: lightweight Python component around `trainop run --rm`.
- `job_component(path)`: a component made from a job file, each `${trialParameters.NAME}` an input.

All run in a stock Python image (`IMAGE`) and pip-install trainop when they start: the wheel of
this very trainop that the compiled component carries, or the requirement `PACKAGE` names.
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use: inside a running component kfp's `dsl` is the slim runtime module, and the
# component body only imports `trainop_kfp.runner`, which needs no kfp. No submodule may be named
# like a name it exports (importing it would rebind the package attribute to the module).
_EXPORTS = {
    "IMAGE": "trainop_kfp.constants",
    "PACKAGE": "trainop_kfp.constants",
    "JobResult": "trainop_kfp.runner",
    "TrainingJobFailed": "trainop_kfp.runner",
    "job_component": "trainop_kfp.file_component",
    "run_job": "trainop_kfp.runner",
    "run_training_job": "trainop_kfp.components",
    "trainop_run": "trainop_kfp.components",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainop_kfp' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
