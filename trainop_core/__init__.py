"""trainop: one operator and one interface for every Kubeflow training job kind (kubeflow.org/v1).

The names below are the public API; everything else is private unless documented as an extension
point (`trainop_core.kinds.base.Kind` for new kinds, `trainop_core.decorators` for pod decorators,
`trainop_core.backends.base` for backends). Importing this package never imports flytekit, kfp,
ray or kubernetes.
"""

from trainop_core.api import (
    apply_defaults,
    dump_json,
    dump_yaml,
    load_job,
    load_jobs,
    prepare,
    validate_job,
)
from trainop_core.api.admission import AdmissionWarning
from trainop_core.api.job import TrainingJob
from trainop_core.api.types import (
    CleanPodPolicy,
    JobCondition,
    JobStatus,
    ReplicaSpec,
    RestartPolicy,
    RunPolicy,
    SchedulingPolicy,
)
from trainop_core.client import (
    TrainingClient,
    failure_message,
    is_finished,
    job_state,
    primary_replica,
)
from trainop_core.errors import (
    AlreadyExistsError,
    DamagedJobError,
    InvalidJobError,
    InvalidNameError,
    JobTimeoutError,
    NotFoundError,
    Problem,
    StateError,
    TerminalError,
    TrainopError,
)
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import build_registry
from trainop_core.report import parse_metrics, report

__version__ = "0.1.0"

__all__ = [
    "AdmissionWarning",
    "AlreadyExistsError",
    "CleanPodPolicy",
    "DamagedJobError",
    "InvalidJobError",
    "InvalidNameError",
    "JobCondition",
    "JobStatus",
    "JobTimeoutError",
    "Kind",
    "NotFoundError",
    "Problem",
    "ReplicaSpec",
    "RestartPolicy",
    "RunPolicy",
    "SchedulingPolicy",
    "StateError",
    "TerminalError",
    "TrainingClient",
    "TrainingJob",
    "TrainopError",
    "__version__",
    "apply_defaults",
    "build_registry",
    "dump_json",
    "dump_yaml",
    "failure_message",
    "is_finished",
    "job_state",
    "load_job",
    "load_jobs",
    "parse_metrics",
    "prepare",
    "primary_replica",
    "report",
    "validate_job",
]
