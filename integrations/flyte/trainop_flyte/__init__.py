"""trainop's Flyte integration: a Flyte task type for every kubeflow.org/v1 job kind.

`@task(task_config=TrainingJob(...))` (or `PyTorch(...)`, `TensorFlow(...)`, `XGBoost(...)`,
`MXNet(...)`, `Paddle(...)`, `MPI(...)`) runs the function on every replica of a job (MPI: in
every rank mpirun starts); `@task(task_config=TrainJob(...))` on every node of a Kubeflow
Trainer v2 TrainJob with the runtime it names; `TrainingJobCommandTask` makes a job
whose replicas run a command (a job YAML) a workflow step. Importing this package registers the
task type with flytekit; `trainop_flyte.plugin` also registers the connector.
"""

from trainop_core.api.types import CleanPodPolicy, RestartPolicy, RunPolicy
from trainop_flyte.command import TrainingJobCommandTask
from trainop_flyte.config import (
    MPI,
    MXNet,
    Paddle,
    PyTorch,
    Replica,
    TensorFlow,
    TrainingJob,
    XGBoost,
)
from trainop_flyte.connector import TrainingJobConnector
from trainop_flyte.local import TrainingJobFailed
from trainop_flyte.task import TrainingJobFunctionTask, register
from trainop_flyte.trainjob import TrainJob

__all__ = [
    "MPI",
    "CleanPodPolicy",
    "MXNet",
    "Paddle",
    "PyTorch",
    "Replica",
    "RestartPolicy",
    "RunPolicy",
    "TensorFlow",
    "TrainJob",
    "TrainingJob",
    "TrainingJobCommandTask",
    "TrainingJobConnector",
    "TrainingJobFailed",
    "TrainingJobFunctionTask",
    "XGBoost",
]

register()
