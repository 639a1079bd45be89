"""Which informer events queue a job: every one that can change its plan, none that cannot."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.effects import expectation_keys
from trainop_core.operator.expectations import Expectations
from trainop_core.operator.handlers import ChildHandler, JobHandler
from trainop_core.operator.observe import cached_child
from trainop_core.operator.workqueue import WorkQueue

Obj = dict[str, Any]


@dataclass
class StandIn:
    """The part of a JobController the handlers use; `own` are (old rv, new rv) it wrote."""

    kind: Kind
    queue: WorkQueue = field(default_factory=lambda: WorkQueue("t"))
    expectations: Expectations = field(default_factory=Expectations)
    own: set[tuple[str, str]] = field(default_factory=set)

    def enqueue(self, obj: Obj) -> None:
        meta = obj["metadata"]
        self.queue.add(f"{meta['namespace']}/{meta['name']}")

    def wrote(self, old: Obj, new: Obj) -> bool:
        return (old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"]) in self.own


def pod(rv: str = "1", phase: str = "Running", **extra_status: Any) -> Obj:
    """A pod of job ns/demo as the API server returns it (before the cache's transform)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo-worker-0",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": rv,
            "labels": {
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": "0",
            },
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "demo",
                    "uid": "job-uid",
                    "controller": True,
                },
            ],
        },
        "spec": {"nodeName": ""},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "pytorch", "ready": False, "restartCount": 0}],
            **extra_status,
        },
    }


def job(rv: str, generation: int = 1, **status: Any) -> Obj:
    meta = {"name": "demo", "namespace": "ns", "uid": "job-uid", "resourceVersion": rv}
    return {"kind": "PyTorchJob", "metadata": {**meta, "generation": generation}, "status": status}


def changed(obj: Obj, rv: str, edit: Callable[[Obj], None]) -> Obj:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = rv
    edit(new)
    return new


@pytest.fixture
def controller(registry: KindRegistry) -> StandIn:
    return StandIn(registry.get("PyTorchJob"))


def pods_handler(controller: StandIn, batch: float = 0.0) -> ChildHandler:
    return ChildHandler({"PyTorchJob": controller}, controller.expectations, "pods", batch)


def set_path(path: str, value: Any) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        *parents, last = path.split(".")
        node = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = value

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(set_path("spec.nodeName", "node-1"), id="the pod is bound to a node"),
        pytest.param(
            set_path("status.containerStatuses.0.ready", True), id="a container turns ready"
        ),
        pytest.param(
            set_path("status.conditions", [{"type": "Ready", "status": "True"}]),
            id="a pod condition changes",
        ),
    ],
)
def test_a_pod_update_the_planner_cannot_see_queues_nothing(
    controller: StandIn, edit: Callable[[Obj], None]
) -> None:
    old = pod()
    pods_handler(controller).on_update(cached_child(old), cached_child(changed(old, "2", edit)))
    assert len(controller.queue) == 0


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(set_path("status.phase", "Succeeded"), id="the pod succeeds"),
        pytest.param(
            set_path("status.containerStatuses.0.restartCount", 1), id="a container restarts"
        ),
        pytest.param(
            set_path("status.containerStatuses.0.state", {"terminated": {"exitCode": 137}}),
            id="the training container exits",
        ),
        pytest.param(set_path("metadata.ownerReferences", []), id="the pod is orphaned"),
        pytest.param(
            set_path("metadata.labels", {"training.kubeflow.org/replica-type": "worker"}),
            id="its replica index label is removed",
        ),
    ],
)
def test_a_pod_update_the_planner_sees_queues_its_job(
    controller: StandIn, edit: Callable[[Obj], None]
) -> None:
    old = pod()
    pods_handler(controller).on_update(cached_child(old), cached_child(changed(old, "2", edit)))
    assert controller.queue.get(0) == "ns/demo"


def test_a_pod_being_deleted_lowers_the_expectations_and_queues_its_job(
    controller: StandIn,
) -> None:
    pods_key, _ = expectation_keys(controller.kind, "ns", "demo")
    controller.expectations.expect(pods_key, dels=1)
    old = pod()
    deleting = changed(old, "2", set_path("metadata.deletionTimestamp", "2026-01-01T00:00:00Z"))
    pods_handler(controller).on_update(cached_child(old), cached_child(deleting))
    assert controller.expectations.satisfied(pods_key)
    assert controller.queue.get(0) == "ns/demo"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pod_events_of_one_batch_period_make_one_reconcile(registry: KindRegistry) -> None:
    clock = FakeClock()
    controller = StandIn(registry.get("PyTorchJob"), queue=WorkQueue("t", clock=clock))
    handler = pods_handler(controller, batch=0.1)
    first = pod(phase="Pending")
    handler.on_add(cached_child(first))
    running = changed(first, "2", set_path("status.phase", "Running"))
    handler.on_update(cached_child(first), cached_child(running))
    clock.now += 0.05
    restarted = changed(running, "3", set_path("status.containerStatuses.0.restartCount", 1))
    handler.on_update(cached_child(running), cached_child(restarted))
    assert controller.queue.get(0) is None  # still gathering
    clock.now += 0.06
    assert controller.queue.get(0) == "ns/demo"
    controller.queue.done("ns/demo")
    assert controller.queue.get(0) is None  # once for all three


def sibling(obj: Obj, index: int) -> Obj:
    """Replica `index` of the same job as `obj`."""
    other = copy.deepcopy(obj)
    other["metadata"]["name"] = f"demo-worker-{index}"
    other["metadata"]["uid"] = f"pod-uid-{index}"
    other["metadata"]["labels"]["training.kubeflow.org/replica-index"] = str(index)
    return other


def test_a_pod_that_ends_is_not_batched_and_replicas_ending_together_make_one_reconcile(
    registry: KindRegistry,
) -> None:
    """A pod's end can be its job's (a PyTorchJob's master): it is looked at at once; replicas
    that end while the job waits in the queue do not queue it twice."""
    clock = FakeClock()
    controller = StandIn(registry.get("PyTorchJob"), queue=WorkQueue("t", clock=clock))
    handler = pods_handler(controller, batch=0.1)
    running = [sibling(pod(), i) for i in range(3)]
    for old in running:
        handler.on_update(
            cached_child(old),
            cached_child(changed(old, "2", set_path("status.phase", "Succeeded"))),
        )
    assert controller.queue.get(0) == "ns/demo"  # at once, no clock moved
    controller.queue.done("ns/demo")
    assert controller.queue.get(0) is None  # once for the three
    restarted = changed(running[0], "3", set_path("status.containerStatuses.0.restartCount", 1))
    handler.on_update(cached_child(running[0]), cached_child(restarted))
    assert controller.queue.get(0) is None  # any other change is batched


def test_the_pod_whose_start_makes_every_pod_of_its_job_run_is_not_batched(
    registry: KindRegistry,
) -> None:
    """No rank of a distributed job moves until every rank runs: the last pod's Running is
    looked at at once, and the job is still reconciled once (the batched add is cancelled)."""
    clock = FakeClock()
    controller = StandIn(registry.get("PyTorchJob"), queue=WorkQueue("t", clock=clock))
    pending = [cached_child(sibling(pod(phase="Pending"), i)) for i in range(2)]
    cache = {p["metadata"]["name"]: p for p in pending}  # the pod cache, already updated
    handler = ChildHandler(
        {"PyTorchJob": controller}, controller.expectations, "pods", 0.1,
        siblings=lambda _: list(cache.values()),
    )  # fmt: skip

    def start(old: Obj) -> None:
        new = changed(old, "2", set_path("status.phase", "Running"))
        cache[new["metadata"]["name"]] = new
        handler.on_update(old, new)

    start(pending[0])
    assert controller.queue.get(0) is None  # the other pod is still pending: batched
    start(pending[1])
    assert controller.queue.get(0) == "ns/demo"  # every pod runs: at once, no clock moved
    controller.queue.done("ns/demo")
    clock.now += 1
    assert controller.queue.get(0) is None  # one reconcile for both


def test_the_echo_of_our_own_job_write_queues_nothing_and_any_other_change_does(
    controller: StandIn,
) -> None:
    handler = JobHandler(controller)
    controller.own.add(("1", "2"))
    handler.on_update(job("1"), job("2", conditions=[{"type": "Created"}]))
    assert len(controller.queue) == 0
    handler.on_update(job("2"), job("3", conditions=[{"type": "Running"}]))  # someone else's
    assert controller.queue.get(0) == "ns/demo"


def test_a_new_generation_queues_the_job_even_in_what_looks_like_our_own_write(
    controller: StandIn,
) -> None:
    controller.own.add(("1", "2"))
    JobHandler(controller).on_update(job("1"), job("2", generation=2))
    assert controller.queue.get(0) == "ns/demo"
