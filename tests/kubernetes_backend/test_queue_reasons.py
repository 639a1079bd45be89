"""Which jobs wait in Kueue and why, from the Workload Kueue keeps per job (pure: no server; the
Kueue suite in tests/kueue shows the same against real Kueue)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_job

from trainop_core.backends.kubernetes.queue import QUEUE_LABEL, waiting_reason, waits_in_kueue


def workload(*conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    fields = ("type", "status", "reason", "message")
    return {"status": {"conditions": [dict(zip(fields, c, strict=True)) for c in conditions]}}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([("QuotaReserved", "False", "Pending", "insufficient quota for cpu")],
         "Pending: insufficient quota for cpu"),
        ([("QuotaReserved", "True", "QuotaReserved", ""),
          ("Admitted", "False", "NoReservation", "waiting for admission checks")],
         "NoReservation: waiting for admission checks"),
        ([("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "")],
         ""),
        ([], "waiting for Kueue to consider it"),
    ],
    ids=[
        "waiting for quota: Kueue's reason and message",
        "quota reserved, admission checks pending: the Admitted condition says why",
        "admitted: no reason",
        "no condition yet: Kueue has not looked at it",
    ],
)  # fmt: skip
def test_the_reason_a_workload_waits(conditions: list[Any], expected: str) -> None:
    assert waiting_reason(workload(*conditions)) == expected


@pytest.mark.parametrize(
    ("labelled", "suspended", "finished", "waits"),
    [(True, True, False, True), (False, True, False, False), (True, False, False, False),
     (True, True, True, False)],
    ids=[
        "labelled, suspended and unfinished: waits",
        "not labelled: a user's suspension, not a queue",
        "admitted (not suspended): does not wait",
        "finished: does not wait",
    ],
)  # fmt: skip
def test_which_jobs_wait_in_kueue(
    labelled: bool, suspended: bool, finished: bool, waits: bool
) -> None:
    builder = make_job("PyTorchJob", "j").master().run_policy(suspend=suspended)
    if labelled:
        builder.labels(**{QUEUE_LABEL: "team"})
    if finished:
        builder.set("status", {"conditions": [{"type": "Succeeded", "status": "True"}]})
    assert waits_in_kueue(builder.job()) is waits
