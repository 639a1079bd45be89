"""trainop's Flyte integration: a Flyte task type for every kubeflow.org/v1 job kind.

`@task(task_config=TrainingJob(...))` (or `PyTorch(...)`, `TensorFlow(...)`, `XGBoost(...)`,
`MXNet(...)`) runs the function on every replica of a job; `TrainingJobCommandTask` makes a job
whose replicas run a command (a job YAML) a workflow step. Importing this package registers the
task type with flytekit; `trainop_flyte.plugin` also registers the connector.
"""

from trainop_core.api.types import CleanPodPolicy, RestartPolicy, RunPolicy
from trainop_flyte.command import TrainingJobCommandTask
from trainop_flyte.config import MXNet, PyTorch, Replica, TensorFlow, TrainingJob, XGBoost
from trainop_flyte.connector import TrainingJobConnector
from trainop_flyte.local import TrainingJobFailed
from trainop_flyte.task import TrainingJobFunctionTask, register

__all__ = [
    "CleanPodPolicy",
    "MXNet",
    "PyTorch",
    "Replica",
    "RestartPolicy",
    "RunPolicy",
    "TensorFlow",
    "TrainingJob",
    "TrainingJobCommandTask",
    "TrainingJobConnector",
    "TrainingJobFailed",
    "TrainingJobFunctionTask",
    "XGBoost",
]

register()
