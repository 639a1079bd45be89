"""The trial runner, the KFP runner and the Flyte connector report a failed job with the core's
`failure_message`, not each with its own pick from the conditions."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.builders import make_job
from trainop_core import TrainingClient, failure_message
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import load_job
from trainop_core.backends.base import LogLine
from trainop_core.kinds.base import Kind

# A Failed condition without a message: each integration used to fall back differently.
STATUS = {
    "conditions": [
        {"type": "Created", "status": "True"},
        {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"},
    ],
    "replicaStatuses": {"Master": {"active": 1}, "Worker": {"failed": 1}},
}


class FailedBackend:
    """Every job it stores has failed as STATUS says; no replica printed anything."""

    name = "failed"

    def __init__(self) -> None:
        self.jobs: dict[str, TrainingJob] = {}

    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        self.jobs[job.key] = job
        return job

    def get(self, name: str, namespace: str) -> TrainingJob:
        return load_job({**self.jobs[f"{namespace}/{name}"].to_dict(), "status": STATUS})

    def list(self, namespace: str | None) -> list[TrainingJob]:
        return list(self.jobs.values())

    def delete(self, name: str, namespace: str) -> None:
        self.jobs.pop(f"{namespace}/{name}")

    def stop(self, name: str, namespace: str, reason: str) -> None:
        return None

    def set_suspended(self, name: str, namespace: str, suspended: bool) -> None:
        return None

    def logs(
        self,
        name: str,
        namespace: str,
        replica: str | None = None,
        follow: bool = False,
        tail: int | None = None,
    ) -> Iterator[LogLine]:
        return iter([])


def job_dict() -> dict[str, object]:
    return make_job("PyTorchJob", "boom").master().workers(1).build()


def trial_runner_reason(client: TrainingClient) -> str:
    pytest.importorskip("trainop_hpo")
    from trainop_hpo import TrialRunner

    template = make_job("PyTorchJob", "boom").master().workers(1)
    template.command(["python", "train.py", "--lr", "${trialParameters.lr}"])
    with TrialRunner(template.build(), client).start({"lr": 0.1}) as trial:
        return trial.result(timeout=10).reason


def kfp_runner_reason(client: TrainingClient) -> str:
    pytest.importorskip("trainop_kfp")
    from trainop_kfp.runner import TrainingJobFailed, run_job

    with pytest.raises(TrainingJobFailed) as failed:
        run_job(job_dict(), client=client, echo=lambda line: None)
    return failed.value.result.message


def flyte_connector_message(client: TrainingClient) -> str:
    pytest.importorskip("flytekit")
    from trainop_flyte.connector import TrainingJobConnector, TrainingJobMetadata

    created = client.create(job_dict())
    connector = TrainingJobConnector(lambda: client)
    meta = TrainingJobMetadata(name=created.name, namespace=created.namespace, kind=created.kind)
    return str(connector.get(meta).message)


@pytest.mark.parametrize(
    "report",
    [trial_runner_reason, kfp_runner_reason, flyte_connector_message],
    ids=["the trial runner", "the KFP runner", "the Flyte connector"],
)
def test_every_integration_reports_the_cores_failure_message(
    report: Callable[[TrainingClient], str],
) -> None:
    client = TrainingClient(FailedBackend())  # type: ignore[arg-type]
    expected = failure_message(load_job({**job_dict(), "status": STATUS}))

    assert report(client) == expected
    assert expected == "PyTorchJobFailed: 1 Worker replica(s) failed"
