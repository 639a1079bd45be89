"""The shared condition algorithm (upstream's setCondition), rule by rule."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.core._kind_builders import T0
from trainop_core.api.types import ConditionStatus, ConditionType, JobStatus
from trainop_core.planner.conditions import find, is_finished, set_condition

C = ConditionType
TRUE, FALSE = ConditionStatus.TRUE, ConditionStatus.FALSE
LATER = T0 + timedelta(minutes=5)


def status_with(*conds: tuple[ConditionType, ConditionStatus, str]) -> JobStatus:
    status = JobStatus()
    for ctype, cstatus, reason in conds:
        set_condition(status, ctype, cstatus, reason, f"{reason} message", T0)
    return status


def types(status: JobStatus) -> list[tuple[str, str]]:
    return [(c.type.value, c.status.value) for c in status.conditions]


def test_a_new_condition_is_appended_last() -> None:
    status = status_with((C.CREATED, TRUE, "JobCreated"))
    assert set_condition(status, C.RUNNING, TRUE, "JobRunning", "m", LATER)
    assert types(status) == [("Created", "True"), ("Running", "True")]
    assert status.conditions[-1].last_transition_time == LATER


def test_the_same_type_status_and_reason_changes_nothing_not_even_timestamps() -> None:
    status = status_with((C.RUNNING, TRUE, "JobRunning"))
    assert not set_condition(status, C.RUNNING, TRUE, "JobRunning", "new message", LATER)
    assert status.conditions[0].last_update_time == T0
    assert status.conditions[0].message == "JobRunning message"


def test_a_new_reason_replaces_the_condition_but_keeps_its_transition_time() -> None:
    status = status_with((C.RUNNING, TRUE, "JobRunning"), (C.CREATED, TRUE, "JobCreated"))
    assert set_condition(status, C.RUNNING, TRUE, "OtherReason", "m", LATER)
    assert types(status) == [("Created", "True"), ("Running", "True")]
    running = status.conditions[-1]
    assert (running.reason, running.last_transition_time, running.last_update_time) == (
        "OtherReason",
        T0,
        LATER,
    )


@pytest.mark.parametrize(
    ("before", "new", "after"),
    [
        (C.RESTARTING, C.RUNNING, [("Running", "True")]),
        (C.RUNNING, C.RESTARTING, [("Restarting", "True")]),
    ],
    ids=["running removes restarting", "restarting removes running"],
)
def test_running_and_restarting_exclude_each_other(
    before: ConditionType, new: ConditionType, after: list[tuple[str, str]]
) -> None:
    status = status_with((before, TRUE, "x"))
    set_condition(status, new, TRUE, "y", "m", LATER)
    assert types(status) == after


@pytest.mark.parametrize("ending", [C.SUCCEEDED, C.FAILED], ids=["success", "failure"])
def test_an_ending_turns_running_false_and_keeps_it(ending: ConditionType) -> None:
    status = status_with((C.CREATED, TRUE, "c"), (C.RUNNING, TRUE, "r"))
    set_condition(status, ending, TRUE, "e", "m", LATER)
    assert types(status) == [("Created", "True"), ("Running", "False"), (ending.value, "True")]
    assert find(status, C.RUNNING) is not None
    assert find(status, C.RUNNING).last_transition_time == LATER  # type: ignore[union-attr]  # asserted above
    assert is_finished(status)


@pytest.mark.parametrize(
    "attempt",
    [C.RUNNING, C.SUCCEEDED, C.RESTARTING, C.SUSPENDED],
    ids=["running", "succeeded", "restarting", "suspended"],
)
def test_failed_is_sticky_nothing_changes_afterwards(attempt: ConditionType) -> None:
    status = status_with((C.FAILED, TRUE, "f"))
    assert not set_condition(status, attempt, TRUE, "later", "m", LATER)
    assert types(status) == [("Failed", "True")]


def test_a_status_flip_of_one_type_records_a_new_transition_time() -> None:
    status = status_with((C.SUSPENDED, TRUE, "JobSuspended"))
    set_condition(status, C.SUSPENDED, FALSE, "JobResumed", "m", LATER)
    assert types(status) == [("Suspended", "False")]
    assert status.conditions[0].last_transition_time == LATER


@pytest.mark.parametrize(
    ("conditions", "finished"),
    [
        ([], False),
        ([("Created", "True"), ("Running", "True")], False),
        ([("Running", "False"), ("Succeeded", "True")], True),
        ([("Failed", "True")], True),
        ([("Succeeded", "False")], False),
    ],
    ids=[
        "a job with no conditions is not finished",
        "a running job is not finished",
        "a succeeded job is finished",
        "a failed job is finished",
        "a false Succeeded does not finish it",
    ],
)
def test_the_wire_form_check_agrees_with_the_model_check(
    conditions: list[tuple[str, str]], finished: bool
) -> None:
    from trainop_core.api.types import JobStatus
    from trainop_core.planner.conditions import is_finished, is_finished_wire

    wire = {"conditions": [{"type": t, "status": s} for t, s in conditions]}
    assert is_finished(JobStatus.model_validate(wire)) is finished
    assert is_finished_wire(wire) is finished
