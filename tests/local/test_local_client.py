"""TrainingClient itself: backend resolution, waiting, and the helpers integrations use.

A fake backend is injected (no processes): the client must work against any Backend."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from builders import make_job, minimal_job

from trainop_core.api.job import TrainingJob
from trainop_core.api.types import ConditionStatus, ConditionType, JobCondition, JobStatus
from trainop_core.backends import UnknownBackendError
from trainop_core.backends.base import LogLine
from trainop_core.client import TrainingClient, is_finished, job_state, primary_replica
from trainop_core.errors import JobTimeoutError
from trainop_core.kinds.base import Kind

ROOT = Path(__file__).resolve().parents[2]


def _with(job: TrainingJob, *types: str) -> TrainingJob:
    now = datetime.now(timezone.utc)
    conditions = [
        JobCondition(type=ConditionType(t), status=ConditionStatus.TRUE, last_update_time=now)
        for t in types
    ]
    return job.model_copy(update={"status": JobStatus(conditions=conditions)})


class FakeBackend:
    """Stores jobs in memory; each `get` advances the job one state along `script`."""

    name = "fake"

    def __init__(self, script: list[tuple[str, ...]]) -> None:
        self.script = script
        self.jobs: dict[str, TrainingJob] = {}
        self.created: list[tuple[str, Path | None]] = []

    def create(self, job: TrainingJob, kind: Kind, *, workdir: Path | None = None) -> TrainingJob:
        self.jobs[job.key] = job
        self.created.append((kind.kind, workdir))
        return job

    def get(self, name: str, namespace: str) -> TrainingJob:
        states = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return _with(self.jobs[f"{namespace}/{name}"], *states)

    def list(self, namespace: str | None) -> list[TrainingJob]:
        return list(self.jobs.values())

    def delete(self, name: str, namespace: str) -> None:
        del self.jobs[f"{namespace}/{name}"]

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
        return iter([LogLine("master-0", "hello")])


def test_create_from_a_file_resolves_relative_paths_next_to_it(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(minimal_job("PyTorchJob", "fromfile").yaml())
    backend = FakeBackend([("Created",)])
    created = TrainingClient(backend).create(path, namespace="team-a")  # type: ignore[arg-type]
    assert created.key == "team-a/fromfile"
    assert backend.created == [("PyTorchJob", tmp_path)]


def test_an_explicit_workdir_wins_for_a_job_given_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = FakeBackend([("Created",)])
    monkeypatch.chdir(ROOT)
    client = TrainingClient(backend)  # type: ignore[arg-type]
    client.create(minimal_job("PyTorchJob", "data").build(), workdir=tmp_path / "w")
    client.create(minimal_job("PyTorchJob", "here").build())  # none chosen: the backend's cwd
    assert backend.created == [("PyTorchJob", (tmp_path / "w").resolve()), ("PyTorchJob", None)]


def test_wait_returns_the_finished_job_and_times_out_clearly() -> None:
    backend = FakeBackend([("Created",), ("Created", "Running"), ("Created", "Running", "Failed")])
    client = TrainingClient(backend)  # type: ignore[arg-type]
    client.create(minimal_job("TFJob", "w").build())
    finished = client.wait("w", poll=0.01)
    assert job_state(finished) == "Failed" and is_finished(finished)

    backend.script = [("Created", "Running")]
    with pytest.raises(
        JobTimeoutError, match=r"default/w did not finish within 0.1 s \(state Running\)"
    ):
        client.wait("w", timeout=0.1, poll=0.01)


@pytest.mark.parametrize(
    ("builder", "primary"),
    [
        (make_job("PyTorchJob").master().workers(2), "master-0"),
        (make_job("TFJob").chief().workers(2), "chief-0"),
        (make_job("TFJob").ps().workers(2), "worker-0"),
        (make_job("XGBoostJob").master().workers(1), "master-0"),
    ],
    ids=["a PyTorchJob's master", "a TFJob's chief", "a chiefless TFJob's worker-0", "XGBoost"],
)
def test_primary_replica_follows_the_kinds_master_role(builder: object, primary: str) -> None:
    job = builder.command(["python"]).job()  # type: ignore[attr-defined]
    assert primary_replica(job) == primary


def test_job_state_is_the_newest_true_condition() -> None:
    job = minimal_job("TFJob").job()
    assert job_state(job) == "Pending"
    assert job_state(_with(job, "Created", "Running", "Suspended")) == "Suspended"


def test_unknown_backends_are_named() -> None:
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'nope' \(known backends: "):
        TrainingClient("nope")


def test_the_local_client_imports_no_cluster_sdk() -> None:
    code = (
        "import sys; from trainop_core.client import TrainingClient; TrainingClient('local');"
        "bad = [m for m in ('kubernetes', 'ray', 'flytekit', 'kfp', 'torch') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
