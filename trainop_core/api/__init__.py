"""The kubeflow.org/v1 job API: models, loading, defaulting and validation."""

from trainop_core.api.defaults import apply_defaults
from trainop_core.api.job import API_VERSION, GROUP, VERSION, JobSpec, TrainingJob
from trainop_core.api.load import (
    InvalidJobsError,
    dump_json,
    dump_yaml,
    load_job,
    load_jobs,
    parse_job,
)
from trainop_core.api.validation import prepare, prepare_all, validate_job

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "InvalidJobsError",
    "JobSpec",
    "TrainingJob",
    "apply_defaults",
    "dump_json",
    "dump_yaml",
    "load_job",
    "load_jobs",
    "parse_job",
    "prepare",
    "prepare_all",
    "validate_job",
]
