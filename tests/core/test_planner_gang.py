"""Gang scheduling: PodGroups for Volcano and scheduler-plugins, pod decoration, Volcano's wait."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, Sim
from trainop_core import gang
from trainop_core.api.load import load_job
from trainop_core.planner import PlanOptions


def sim(scheduler: str, **policy: Any) -> Sim:
    b = make_job("PyTorchJob", "g").master().workers(2)
    b.container("Master", resources={"requests": {"cpu": "500m", "memory": "1Gi"}})
    b.container("Worker", resources={"limits": {"cpu": "2", "memory": "512Mi"}})
    if policy:
        b.run_policy(schedulingPolicy=policy)
    b.labels(team="a")
    job = load_job(b.build(), registry=REGISTRY)
    return Sim(job, options=PlanOptions(gang_scheduler_name=scheduler))


def test_volcano_pod_group_sums_the_first_min_member_pods_and_defaults_the_queue() -> None:
    s = sim("volcano", minAvailable=2, priorityClass="high")
    group = s.plan().pod_group
    assert group is not None
    assert (group["apiVersion"], group["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert group["metadata"]["name"] == "g"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    # Master requests (0.5 CPU, 1Gi) + one Worker's limits (2 CPU, 512Mi): requests else limits.
    assert group["spec"] == {
        "minMember": 2,
        "queue": "default",
        "priorityClassName": "high",
        "minResources": {"cpu": "2500m", "memory": "1536Mi"},
    }


def test_scheduler_plugins_pod_group_uses_every_replica_and_the_timeout() -> None:
    group = sim("my-coscheduler", scheduleTimeoutSeconds=30, queue="ignored").plan().pod_group
    assert group is not None
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["scheduleTimeoutSeconds"] == 30
    assert "queue" not in group["spec"]
    assert group["spec"]["minResources"] == {"cpu": "4500m", "memory": "2Gi"}


@pytest.mark.parametrize(
    ("phase", "held"),
    [(None, True), ("Pending", True), ("Inqueue", False), ("Running", False)],
    ids=[
        "no PodGroup phase yet holds the pods back",
        "a Pending PodGroup holds the pods back",
        "an Inqueue PodGroup lets the pods be created",
        "a Running PodGroup lets the pods be created",
    ],
)
def test_volcano_delays_pods_until_the_pod_group_is_admitted(phase: str | None, held: bool) -> None:
    s = sim("volcano")
    s.pod_group_phase = phase
    p = s.step()
    assert (p.create_pods == []) is held
    assert p.pod_group is not None
    if held:
        assert p.status is not None and p.status.last_reconcile_time == s.now


def test_scheduler_plugins_never_delay_pod_creation() -> None:
    assert len(sim("my-coscheduler").step().create_pods) == 3


@pytest.mark.parametrize(
    ("scheduler", "where", "key", "value"),
    [
        ("Volcano", "annotations", "scheduling.k8s.io/group-name", "g"),
        ("Volcano", "annotations", "volcano.sh/task-spec", "worker"),
        ("my-coscheduler", "labels", "scheduling.x-k8s.io/pod-group", "g"),
    ],
    ids=[
        "volcano pods name their group",
        "volcano pods name their task",
        "scheduler-plugins pods carry the group label",
    ],
)
def test_pods_point_at_their_pod_group(scheduler: str, where: str, key: str, value: str) -> None:
    s = sim(scheduler)
    s.pod_group_phase = "Inqueue"
    pod = next(p for p in s.plan().create_pods if p["metadata"]["name"] == "g-worker-0")
    assert pod["metadata"][where][key] == value
    assert pod["spec"]["schedulerName"] == scheduler.lower()


def test_a_template_scheduler_name_is_kept_with_a_warning() -> None:
    s = sim("volcano")
    s.pod_group_phase = "Running"
    data = s.job.to_dict()
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "mine"
    s.job = load_job(data, registry=REGISTRY)
    p = s.plan()
    worker = next(m for m in p.create_pods if m["metadata"]["name"] == "g-worker-1")
    assert worker["spec"]["schedulerName"] == "mine"
    assert [e.reason for e in p.events].count("SetPodTemplateSchedulerName") == 1


def test_the_pod_group_goes_when_the_job_ends() -> None:
    s = sim("volcano")
    s.pod_group_phase = "Running"
    s.step()
    s.set_all("Running")
    s.set("Master", 0, "Succeeded", exit_code=0)
    assert s.step().delete_pod_group


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", "0.5"), ("2", "2"), ("1Gi", str(1024**3)), ("1.5", "1.5"), ("2k", "2000")],
    ids=["milli", "plain", "binary suffix", "decimal fraction", "decimal suffix"],
)
def test_quantities_are_parsed_in_base_units(text: str, value: str) -> None:
    assert gang.parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [("2.5", "2500m"), ("3", "3"), (str(3 * 1024**2), "3Mi"), ("1000000000", "1G")],
    ids=[
        "fractions print as milli",
        "integers stay plain",
        "binary multiples",
        "decimal multiples",
    ],
)
def test_quantities_are_formatted_compactly(value: str, text: str) -> None:
    assert gang.format_quantity(Decimal(value)) == text
