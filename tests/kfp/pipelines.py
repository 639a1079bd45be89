"""Pipelines the KFP tests compile and run under kfp.local (module-level, so that a subprocess
can import and run them too)."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as types.
from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Metrics
from trainop_kfp import run_training_job


class Outputs(NamedTuple):
    state: str
    name: str
    metrics: Metrics


@dsl.pipeline(name="train-and-report")
def train_pipeline(job: dict, timeout_seconds: int = 600) -> Outputs:
    """One training job on the local backend; its outputs become the pipeline's."""
    task = run_training_job(job=job, backend="local", timeout_seconds=timeout_seconds)
    return Outputs(task.outputs["state"], task.outputs["name"], task.outputs["metrics"])
