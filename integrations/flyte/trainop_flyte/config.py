"""The task configuration: one generic `TrainingJob` for every kind, plus short constructors.

The config only names what a user chooses (kind, replica counts and per-replica settings, the
core's RunPolicy and kind options); everything a kind means is left to the core, which validates
the job built from it (`trainop_flyte.spec.build_job`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flytekit import Resources

from trainop_core.api.types import ApiModel, RestartPolicy, RunPolicy


@dataclass(frozen=True)
class Replica:
    """Settings of one replica type; unset fields fall back to the job's (image) or the core's.

    `restart_policy` unset means Never, as in Flyte's own Kubeflow plugins: Flyte retries the
    task (`@task(retries=...)`), so a failing replica fails it. Set OnFailure, Always or ExitCode
    to have the operator restart replicas inside one task attempt instead."""

    replicas: int = 1
    image: str | None = None
    requests: Resources | None = None
    limits: Resources | None = None
    restart_policy: RestartPolicy | None = None


ReplicaEntry = int | Replica


@dataclass(frozen=True)
class TrainingJob:
    """Run the decorated function as one replica of a kubeflow.org/v1 job of `kind`.

    `replicas` maps replica types (any case, e.g. "Master", "worker") to a count or a `Replica`.
    `nproc_per_node`, `elastic_policy` and `success_policy` are the kind options of the same names
    (the core rejects them for kinds that do not have them). `compat=True` serialises PyTorchJob and
    TFJob as Flyte's own `pytorch` / `tensorflow` task types (see `trainop_flyte.compat`).
    """

    kind: str
    replicas: Mapping[str, ReplicaEntry]
    run_policy: RunPolicy | None = None
    nproc_per_node: str | int | None = None
    elastic_policy: ApiModel | Mapping[str, Any] | None = None
    success_policy: str | None = None
    image: str | None = None
    namespace: str | None = None
    compat: bool = False
    spec_options: Mapping[str, Any] = field(default_factory=dict)

    def replica(self, rtype: str) -> Replica:
        """The settings of one replica type, a bare count read as `Replica(replicas=count)`."""
        entry = self.replicas[rtype]
        return entry if isinstance(entry, Replica) else Replica(replicas=entry)

    def kind_options(self) -> dict[str, Any]:
        """The kind options that were set, by their Python field names."""
        options = {
            "nproc_per_node": _as_str(self.nproc_per_node),
            "elastic_policy": self.elastic_policy,
            "success_policy": self.success_policy,
            **self.spec_options,
        }
        return {name: value for name, value in options.items() if value is not None}


def _as_str(value: str | int | None) -> str | None:
    return None if value is None else str(value)


def _entry(count: int, settings: Replica | None) -> ReplicaEntry:
    if settings is None:
        return count
    return Replica(
        replicas=count,
        image=settings.image,
        requests=settings.requests,
        limits=settings.limits,
        restart_policy=settings.restart_policy,
    )


def _counts(entries: Mapping[str, tuple[int, Replica | None]]) -> dict[str, ReplicaEntry]:
    return {rtype: _entry(n, settings) for rtype, (n, settings) in entries.items() if n > 0}


def PyTorch(
    workers: int = 1,
    master: bool = True,
    *,
    worker: Replica | None = None,
    **options: Any,
) -> TrainingJob:
    """A PyTorchJob: one Master (unless `master=False`) and `workers` Workers."""
    replicas = _counts({"Master": (int(master), None), "Worker": (workers, worker)})
    return TrainingJob(kind="PyTorchJob", replicas=replicas, **options)


def TensorFlow(
    workers: int = 1,
    chief: bool = False,
    ps: int = 0,
    evaluator: bool = False,
    *,
    worker: Replica | None = None,
    **options: Any,
) -> TrainingJob:
    """A TFJob: `workers` Workers, optionally a Chief, `ps` parameter servers and an Evaluator."""
    replicas = _counts(
        {
            "Chief": (int(chief), None),
            "PS": (ps, None),
            "Worker": (workers, worker),
            "Evaluator": (int(evaluator), None),
        }
    )
    return TrainingJob(kind="TFJob", replicas=replicas, **options)


def XGBoost(
    workers: int = 1, master: bool = True, *, worker: Replica | None = None, **options: Any
) -> TrainingJob:
    """An XGBoostJob: one Master (unless `master=False`) and `workers` Workers."""
    replicas = _counts({"Master": (int(master), None), "Worker": (workers, worker)})
    return TrainingJob(kind="XGBoostJob", replicas=replicas, **options)


def MXNet(
    workers: int = 1, servers: int = 1, scheduler: bool = True, **options: Any
) -> TrainingJob:
    """An MXJob: one Scheduler (unless `scheduler=False`), `servers` Servers, `workers` Workers."""
    replicas = _counts(
        {"Scheduler": (int(scheduler), None), "Server": (servers, None), "Worker": (workers, None)}
    )
    return TrainingJob(kind="MXJob", replicas=replicas, **options)


def Paddle(
    workers: int = 1, master: bool = False, *, worker: Replica | None = None, **options: Any
) -> TrainingJob:
    """A PaddleJob: `workers` Workers, collective (worker 0 hosts the rendezvous), or with one
    Master (`master=True`: parameter-server mode). Each replica runs the function with
    PADDLE_MASTER, PADDLE_NNODES and PADDLE_JOB_ID set."""
    replicas = _counts({"Master": (int(master), None), "Worker": (workers, worker)})
    return TrainingJob(kind="PaddleJob", replicas=replicas, **options)


def MPI(workers: int = 1, slots: int = 1, **options: Any) -> TrainingJob:
    """An MPIJob: the Launcher runs the function under mpirun, one rank per slot of the
    `workers` Workers (`slots` each); the task's result is rank 0's."""
    replicas = _counts({"Launcher": (1, None), "Worker": (workers, None)})
    spec = {"slots_per_worker": slots, **options.pop("spec_options", {})}
    return TrainingJob(kind="MPIJob", replicas=replicas, spec_options=spec, **options)
