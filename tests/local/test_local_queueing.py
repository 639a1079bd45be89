"""The local queue's rules, plan-in/plan-out: requests, priority, order and the reasons given."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from trainop_core.backends.local.queueing import (
    PRIORITY_FIELD,
    QUEUE_FIELD,
    QUEUE_LABEL,
    WORKLOAD_PRIORITY_FIELD,
    WORKLOAD_PRIORITY_LABEL,
    Entry,
    Resources,
    decide,
    job_requests,
    pod_requests,
    priority_of,
    queue_of,
)
from trainop_core.errors import InvalidJobError

GI = Decimal(2**30)


def pod(*containers: dict[str, object], init: tuple[dict[str, object], ...] = ()) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), "initContainers": list(init)}}


def container(**requests: str) -> dict[str, object]:
    return {"name": "c", "resources": {"requests": requests}} if requests else {"name": "c"}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (pod(container(cpu="500m", memory="1Gi")), Resources(Decimal("0.5"), GI)),
        (pod(container()), Resources(Decimal(1), Decimal(0))),
        (pod(container(memory="1Gi")), Resources(Decimal(1), GI)),
        (pod(container(cpu="2"), container(cpu="250m")), Resources(Decimal("2.25"), Decimal(0))),
        (
            pod({"name": "c", "resources": {"limits": {"cpu": "3", "memory": "2Gi"}}}),
            Resources(Decimal(3), 2 * GI),
        ),
        (pod(container(cpu="1"), init=(container(cpu="4"),)), Resources(Decimal(4), Decimal(0))),
        (pod(container(cpu="1"), init=(container(),)), Resources(Decimal(1), Decimal(0))),
    ],
    ids=[
        "requests are taken as given",
        "a container without requests counts as one CPU and no memory",
        "a container with only a memory request counts one CPU",
        "containers of a pod add up",
        "limits stand in for requests",
        "a larger init container sets the pod's request",
        "an init container without requests adds nothing",
    ],
)
def test_pod_requests(template: dict[str, Any], expected: Resources) -> None:
    assert pod_requests(template) == expected


def test_a_job_requests_the_sum_of_its_replicas() -> None:
    master, worker = pod(container(cpu="1")), pod(container(cpu="500m", memory="1Gi"))
    assert job_requests([(1, master), (3, worker)]) == Resources(Decimal("2.5"), 3 * GI)


def entry(key: str, cpu: str = "1", priority: int = 0, at: int = 0, **kw: bool) -> Entry:
    return Entry(key, Resources(Decimal(cpu)), priority, at, **kw)


QUOTA = Resources(Decimal(2), 8 * GI)


def test_admits_in_priority_then_submission_order_while_there_is_room() -> None:
    entries = [entry("low", at=1), entry("high", priority=10, at=3), entry("mid", priority=5, at=2)]
    entries += [entry("low-later", at=4)]
    decision = decide("q", QUOTA, entries)
    assert decision.admit == ("high", "mid")
    assert set(decision.waiting) == {"low", "low-later"}


def test_admitted_jobs_hold_their_quota() -> None:
    decision = decide("q", QUOTA, [entry("running", admitted=True), entry("a", at=1)])
    assert decision.admit == ("a",)
    decision = decide("q", QUOTA, [entry("running", "2", admitted=True), entry("a", at=1)])
    assert decision.admit == ()
    assert decision.waiting["a"] == (
        "insufficient unused quota in queue 'q' for cpu (cpu: requests 1, 0 of 2 free)"
    )


def test_the_reason_names_each_short_resource() -> None:
    running = Entry("running", Resources(Decimal(1), 8 * GI), admitted=True)
    big = Entry("big", Resources(Decimal(2), 9 * GI))
    decision = decide("q", Resources(Decimal(2), 16 * GI), [running, big])
    assert decision.waiting["big"] == (
        "insufficient unused quota in queue 'q' for cpu, memory "
        "(cpu: requests 2, 1 of 2 free; memory: requests 9Gi, 8Gi of 16Gi free)"
    )


def test_a_job_that_does_not_fit_now_lets_a_smaller_one_pass() -> None:
    entries = [entry("running", admitted=True), entry("two", "2", at=1), entry("one", at=2)]
    decision = decide("q", QUOTA, entries)
    assert decision.admit == ("one",)
    assert "for cpu (cpu: requests 2, 1 of 2 free)" in decision.waiting["two"]


def test_a_job_larger_than_the_quota_is_told_it_can_never_be_admitted() -> None:
    decision = decide("q", QUOTA, [Entry("huge", Resources(Decimal(1), 9 * GI))])
    assert decision.admit == ()
    assert decision.waiting["huge"] == (
        "can never be admitted: it requests 9Gi memory and queue 'q' has a quota of 8Gi "
        "(`trainop queue set q --memory ...` raises it)"
    )


@pytest.mark.parametrize("value", ["Q", "a_b", "-a", "a" * 64, ""], ids=repr)
def test_a_queue_label_that_cannot_name_a_queue_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(InvalidJobError) as err:
        queue_of({QUEUE_LABEL: value})
    assert err.value.problems[0].path == QUEUE_FIELD


def test_no_queue_label_means_not_queued() -> None:
    assert queue_of({"other": "x"}) is None
    assert queue_of({QUEUE_LABEL: "team-a"}) == "team-a"


def test_priority_comes_from_the_class_value() -> None:
    assert priority_of(None, None, {}) == 0
    assert priority_of(None, "high", {"high": 100}) == 100
    assert priority_of({}, "system-node-critical", {}) == 2000001000


def test_kueues_priority_class_label_wins_over_the_jobs_priority_class() -> None:
    classes = {"high": 100, "low": 1}
    assert priority_of({WORKLOAD_PRIORITY_LABEL: "high"}, "low", classes) == 100


@pytest.mark.parametrize(
    ("labels", "priority_class", "field"),
    [
        (None, "urgent", PRIORITY_FIELD),
        ({WORKLOAD_PRIORITY_LABEL: "urgent"}, "high", WORKLOAD_PRIORITY_FIELD),
    ],
    ids=["in priorityClass", "in Kueue's priority-class label"],
)
def test_an_unknown_priority_class_is_refused_naming_the_field_and_the_known_ones(
    labels: dict[str, str] | None, priority_class: str, field: str
) -> None:
    with pytest.raises(InvalidJobError) as err:
        priority_of(labels, priority_class, {"high": 100})
    problem = err.value.problems[0]
    assert problem.path == field
    assert "'urgent' is not known here (known: high, system-cluster-critical" in problem.message
