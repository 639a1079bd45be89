"""Which jobs wait in Kueue and why, from the Workload Kueue keeps per job (pure: no server; the
Kueue suite in tests/kueue shows the same against real Kueue)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_job

from trainop_core.backends.kubernetes.queue import (
    QUEUE_LABEL,
    KueueWorkloads,
    waiting_reason,
    waits_in_kueue,
)
from trainop_core.errors import TrainopError


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


class Workloads:
    """A CustomObjectsApi stand-in: the Workloads of one namespace, or an API error."""

    def __init__(self, items: list[dict[str, Any]] | None = None, status: int = 0) -> None:
        self.items, self.status = items or [], status

    def list_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        assert (group, version, plural) == ("kueue.x-k8s.io", "v1beta2", "workloads")
        if self.status:
            raise ApiException(status=self.status, reason="denied")
        return {"items": self.items}


def queued_job(name: str, uid: str) -> Any:
    builder = make_job("PyTorchJob", name).master().run_policy(suspend=True)
    return builder.labels(**{QUEUE_LABEL: "team"}).set("metadata.uid", uid).job()


def test_reasons_come_from_the_workload_the_job_owns() -> None:
    owned = workload(("QuotaReserved", "False", "Pending", "insufficient quota for cpu"))
    owned["metadata"] = {"ownerReferences": [{"uid": "u1"}]}
    jobs = [queued_job("a", "u1"), queued_job("b", "u2")]
    assert KueueWorkloads(custom_objects=Workloads([owned])).reasons(jobs) == {
        "u1": "Pending: insufficient quota for cpu",
        "u2": "no Kueue Workload for it yet",
    }


@pytest.mark.parametrize(
    "status", [403, 404], ids=["may not list Workloads: no reasons", "no Kueue: no reasons"]
)
def test_without_kueue_or_the_right_to_read_it_there_are_no_reasons_and_no_error(
    status: int,
) -> None:
    api = KueueWorkloads(custom_objects=Workloads(status=status))
    assert api.reasons([queued_job("a", "u1")]) == {}


def test_any_other_api_error_names_what_was_read() -> None:
    api = KueueWorkloads(custom_objects=Workloads(status=500))
    with pytest.raises(TrainopError, match="Kueue Workloads in default"):
        api.reasons([queued_job("a", "u1")])
