"""`failure_message`: one text for why a finished job failed, with a fallback at each level."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_job
from trainop_core import failure_message
from trainop_core.api.job import TrainingJob
from trainop_core.api.load import load_job


def failed_job(condition: dict[str, Any], replica_statuses: dict[str, Any]) -> TrainingJob:
    data = make_job("PyTorchJob", "boom").master().workers(2).build()
    data["status"] = {
        "conditions": [{"type": "Created", "status": "True"}, condition],
        "replicaStatuses": replica_statuses,
    }
    return load_job(data)


@pytest.mark.parametrize(
    ("condition", "statuses", "expected"),
    [
        (
            {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
             "message": "PyTorchJob boom is failed because 1 Worker replica(s) failed."},
            {"Worker": {"failed": 1, "active": 1}},
            "PyTorchJob boom is failed because 1 Worker replica(s) failed.",
        ),
        (
            {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"},
            {"Master": {"active": 1}, "Worker": {"failed": 2}},
            "PyTorchJobFailed: 2 Worker replica(s) failed",
        ),
        (
            {"type": "Failed", "status": "True"},
            {},
            "PyTorchJob default/boom failed (PyTorchJobFailed; no message recorded)",
        ),
        ({"type": "Running", "status": "True"}, {"Worker": {"failed": 1}}, ""),
    ],
    ids=[
        "the failed condition's message comes first",
        "without a message the failed replica types are named",
        "with neither a generic text names the job",
        "a job that has not failed has no failure message",
    ],
)  # fmt: skip
def test_failure_message_falls_back_in_order(
    condition: dict[str, Any], statuses: dict[str, Any], expected: str
) -> None:
    assert failure_message(failed_job(condition, statuses)) == expected
