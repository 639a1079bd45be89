"""PreparedJobs: a job is read, defaulted and validated once per generation, not per reconcile."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest
from builders import make_job

from trainop_core.api.types import ConditionType, ReplicaStatus
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.prepared import PreparedJobs
from trainop_core.planner import plan
from trainop_core.planner.addressing import KubernetesAddressing
from trainop_core.planner.types import Observed

Obj = dict[str, Any]
KEY = "ns/demo"


def stored(generation: int = 1, uid: str = "uid-1", **status: Any) -> Obj:
    """The job as the API server returns it: namespaced, with uid, generation, resourceVersion."""
    job = make_job("PyTorchJob").namespace("ns").master().workers(2).build()
    job["metadata"].update(uid=uid, generation=generation, resourceVersion="10")
    if status:
        job["status"] = status
    return job


def running(rv: str, active: int) -> Obj:
    job = stored(
        conditions=[{"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}],
        replicaStatuses={"Worker": {"active": active}},
    )
    job["metadata"]["resourceVersion"] = rv
    return job


def test_many_reconciles_of_one_generation_prepare_it_once_and_see_every_new_status(
    registry: KindRegistry,
) -> None:
    jobs = PreparedJobs(registry)
    first = jobs.get(KEY, stored())
    models = [jobs.get(KEY, running(str(20 + n), n)) for n in range(5)]
    assert jobs.prepared == 1
    assert first.status is None
    for n, model in enumerate(models):
        assert model.status is not None
        assert model.status.conditions[0].type == ConditionType.RUNNING
        assert model.status.replica_statuses["Worker"] == ReplicaStatus(active=n)
        assert model.metadata.resource_version == str(20 + n)
    # defaulted as `prepare` defaults: replicas and restart policy filled in
    assert models[-1].spec.replica_specs["Worker"].replicas == 2
    assert models[-1].spec.run_policy.clean_pod_policy is not None


def test_a_new_generation_is_prepared_again_and_its_spec_used(registry: KindRegistry) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, stored())
    changed = stored(generation=2)
    changed["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5
    model = jobs.get(KEY, changed)
    assert jobs.prepared == 2
    assert model.spec.replica_specs["Worker"].replicas == 5


def suspended(generation: int, suspend: Any) -> Obj:
    job = stored(generation=generation)
    job["spec"]["runPolicy"] = {"suspend": suspend, "backoffLimit": 3}
    job["metadata"]["resourceVersion"] = str(10 + generation)
    return job


def test_a_generation_that_only_resumes_the_job_reuses_the_prepared_model(
    registry: KindRegistry,
) -> None:
    """Kueue's admission (with no node labels to add) and a user's suspend or resume change
    only runPolicy.suspend: the job is not read, defaulted and validated again."""
    jobs = PreparedJobs(registry)
    assert jobs.get(KEY, suspended(1, True)).spec.run_policy.suspend is True
    resumed = suspended(2, False)
    resumed["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    model = jobs.get(KEY, resumed)
    assert jobs.prepared == 1
    assert model.spec.run_policy.suspend is False
    assert model.spec.run_policy.backoff_limit == 3
    assert model.metadata.generation == 2 and model.metadata.resource_version == "12"
    assert model.status is not None and model.status.conditions[0].type == "Suspended"
    assert jobs.get(KEY, suspended(3, True)).spec.run_policy.suspend is True
    assert jobs.prepared == 1
    assert jobs.get(KEY, resumed).spec.run_policy.suspend is False  # the kept one is generation 3


def test_a_resume_that_changes_anything_else_is_prepared_again(registry: KindRegistry) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, suspended(1, True))
    admitted = suspended(2, False)
    template = admitted["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["spec"]["nodeSelector"] = {"flavor": "a"}  # what Kueue writes for a flavor's labels
    model = jobs.get(KEY, admitted)
    assert jobs.prepared == 2
    assert model.spec.replica_specs["Worker"].template["spec"]["nodeSelector"] == {"flavor": "a"}
    relabelled = suspended(3, True)
    relabelled["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
        "flavor": "a"
    }
    relabelled["metadata"]["labels"] = {"team": "b"}
    jobs.get(KEY, relabelled)
    assert jobs.prepared == 3


def test_a_suspend_that_is_not_a_boolean_is_refused_not_served_from_the_cache(
    registry: KindRegistry,
) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, suspended(1, True))
    with pytest.raises(InvalidJobError, match="suspend"):
        jobs.get(KEY, suspended(2, "yes"))


def test_a_changed_spec_that_breaks_a_rule_is_refused_not_served_from_the_cache(
    registry: KindRegistry,
) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, stored())
    broken = stored(generation=2)
    broken["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = []
    for _ in range(2):  # an invalid job is never kept: refused on every look
        with pytest.raises(InvalidJobError, match="must have at least one container"):
            jobs.get(KEY, broken)
    assert jobs.prepared == 3


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda j: j["metadata"].update(labels={"team": "a"}), id="new labels"),
        pytest.param(lambda j: j["metadata"].update(annotations={"a": "b"}), id="new annotations"),
        pytest.param(lambda j: j["metadata"].update(uid="uid-2"), id="a new job of the same name"),
        pytest.param(
            lambda j: j["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
            id="deletion started",
        ),
    ],
)
def test_metadata_that_changes_without_a_new_generation_prepares_the_job_again(
    registry: KindRegistry, change: Any
) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, stored())
    job = stored()
    change(job)
    model = jobs.get(KEY, job)
    assert jobs.prepared == 2
    assert model.metadata.uid == job["metadata"]["uid"]
    assert model.metadata.labels == job["metadata"].get("labels")
    assert model.metadata.annotations == job["metadata"].get("annotations")


def test_a_status_the_model_cannot_read_is_reported_naming_the_field(
    registry: KindRegistry,
) -> None:
    jobs = PreparedJobs(registry)
    jobs.get(KEY, stored())
    bad = stored(conditions=[{"type": "Exploded", "status": "True"}])
    with pytest.raises(InvalidJobError, match=r"status\.conditions\[0\]\.type"):
        jobs.get(KEY, bad)


def test_a_deleted_job_is_dropped_and_the_cache_stays_bounded(registry: KindRegistry) -> None:
    jobs = PreparedJobs(registry, max_entries=2)
    for name in ("a", "b"):
        jobs.get(f"ns/{name}", stored(uid=name))
    jobs.get("ns/a", stored(uid="a"))  # a is now the most recently used
    jobs.get("ns/c", stored(uid="c"))  # b, the least recently used, goes
    assert len(jobs) == 2
    assert jobs.prepared == 3
    jobs.get("ns/a", stored(uid="a"))
    assert jobs.prepared == 3
    jobs.get("ns/b", stored(uid="b"))
    assert jobs.prepared == 4
    jobs.forget("ns/b")
    jobs.get("ns/b", stored(uid="b"))
    assert jobs.prepared == 5


def test_planning_from_a_cached_model_leaves_the_cached_model_unchanged(
    registry: KindRegistry,
) -> None:
    jobs = PreparedJobs(registry)
    kind = registry.get("PyTorchJob")
    model = jobs.get(KEY, stored())
    before = copy.deepcopy(model.to_dict())
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    made = plan(model, kind, Observed(), now, KubernetesAddressing(model, kind, "cluster.local"))
    assert made.create_pods and made.status is not None  # the planner did build on it
    again = jobs.get(KEY, stored())
    assert jobs.prepared == 1
    assert again.to_dict() == before
