"""Planner details that are not per-kind behaviours: purity, events, counting, selectors."""

from __future__ import annotations

import pytest

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, T0, Sim, job
from trainop_core.api.load import load_job


def test_planning_never_changes_the_job_it_was_given() -> None:
    original = job("PyTorchJob", backoffLimit=1)
    before = original.model_dump()
    sim = Sim(original)
    sim.plan()
    assert original.model_dump() == before
    assert original.status is None


def test_a_template_restart_policy_is_overwritten_with_one_warning_per_replica_type() -> None:
    b = make_job("PyTorchJob", "rp").master().workers(3)
    b.set("spec.pytorchReplicaSpecs.Worker.template.spec.restartPolicy", "Always")
    first = Sim(load_job(b.build(), registry=REGISTRY)).step()
    workers = [p for p in first.create_pods if "worker" in p["metadata"]["name"]]
    assert {p["spec"]["restartPolicy"] for p in workers} == {"OnFailure"}
    warnings = [e for e in first.events if e.reason == "SetPodTemplateRestartPolicy"]
    assert [w.type for w in warnings] == ["Warning"]


def test_terminated_pods_report_their_exit_code() -> None:
    sim = Sim(job("TFJob"))
    sim.step()
    sim.set_all("Running")
    sim.set("Worker", 1, "Succeeded", exit_code=0)
    messages = [e.message for e in sim.step().events if e.reason == "ExitedWithCode"]
    assert messages == ["Pod: default.demo-worker-1 exited with code 0"]


def test_pods_ending_alike_are_one_exit_event_per_code() -> None:
    sim = Sim(load_job(make_job("TFJob", "demo").workers(3).build(), registry=REGISTRY))
    sim.step()
    sim.set_all("Running")
    sim.set("Worker", 2, "Succeeded", exit_code=0)
    sim.set("Worker", 0, "Failed", exit_code=1)
    sim.set("Worker", 1, "Succeeded", exit_code=0)
    messages = [e.message for e in sim.step().events if e.reason == "ExitedWithCode"]
    assert sorted(messages) == [
        "Pod: default.demo-worker-0 exited with code 1",
        "Pods: default.demo-worker-1, default.demo-worker-2 exited with code 0",
    ]


@pytest.mark.parametrize(
    ("phase", "counted"),
    [("Pending", {}), ("Running", {"active": 1}), ("Succeeded", {"succeeded": 1}),
     ("Failed", {"failed": 1}), ("Unknown", {})],
    ids=["pending pods count nowhere", "running pods are active", "succeeded pods count",
         "failed pods count", "unknown pods count nowhere"],
)  # fmt: skip
def test_replica_statuses_count_pods_by_phase(phase: str, counted: dict[str, int]) -> None:
    sim = Sim(make_job("TFJob", "c").ps(1).workers(1).job())
    sim.step()
    sim.set("PS", 0, phase, exit_code=1 if phase == "Failed" else None)
    sim.step()
    assert sim.job.status is not None
    ps = sim.job.status.replica_statuses["PS"].to_dict()
    assert ps == counted


def test_scale_kinds_publish_the_worker_selector_for_the_hpa() -> None:
    sim = Sim(job("PyTorchJob", "sel"))
    sim.step()
    assert sim.job.status is not None
    statuses = sim.job.status.replica_statuses
    assert statuses["Worker"].selector == (
        "training.kubeflow.org/job-name=sel,"
        "training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )
    assert statuses["Master"].selector is None


def test_a_job_that_is_already_finished_only_settles() -> None:
    sim = Sim(job("XGBoostJob", cleanPodPolicy="All"))
    sim.step()
    sim.set_all("Running")
    sim.set("Master", 0, "Succeeded", exit_code=0)
    sim.step()
    assert sim.pods == {}
    quiet = sim.step(3600)
    assert quiet.is_empty
    assert sim.now > T0


def test_a_job_being_deleted_is_left_to_the_garbage_collector() -> None:
    sim = Sim(job("MXJob"))
    sim.step()
    meta = sim.job.metadata.model_copy(update={"deletion_timestamp": T0})
    sim.job = sim.job.model_copy(update={"metadata": meta})
    assert sim.step().is_empty
