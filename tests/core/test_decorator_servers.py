"""Decorator servers on real HTTP(S) on loopback: what a server's answer does to a plan, how
often servers are called, and what each kind of failure gives under each failurePolicy."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from decorator_servers import (
    POOL_ENV,
    POOL_LABEL,
    garbage,
    huge,
    patching,
    policy_server,
    refusing,
    settings,
    slow,
)

from tests.core._kind_builders import REGISTRY, T0
from trainop_core.api.job import TrainingJob
from trainop_core.api.validation import prepare
from trainop_core.decorators.decoration import Decorated, Decoration
from trainop_core.planner import KubernetesAddressing, Observed, Plan, plan


def pytorch_job() -> Any:
    return make_job("PyTorchJob", "d").master().workers(2)


JOB = pytorch_job()


def job_and_plan(builder: Any = JOB, generation: int = 1) -> tuple[TrainingJob, Plan]:
    kind, job = prepare(builder.build(), registry=REGISTRY)
    job.metadata.uid, job.metadata.generation = "uid-1", generation
    return job, plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind))


def decorate(decoration: Decoration, builder: Any = JOB, generation: int = 1) -> Decorated:
    job, first = job_and_plan(builder, generation)
    return decoration.decorate(job, REGISTRY.get(job.kind), first)


def pods(decorated: Decorated) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in decorated.plan.create_pods}


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


class Observer:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.failures: Counter[tuple[str, str]] = Counter()

    def observe_call(self, server: str, seconds: float) -> None:
        self.calls[server] += 1

    def count_failure(self, server: str, reason: str) -> None:
        self.failures[(server, reason)] += 1


def test_the_site_policy_decorates_every_pod_over_https_with_one_call_per_replica_type(
    tmp_path: Path,
) -> None:
    with policy_server(tls=tmp_path) as server:
        observer = Observer()
        decorated = decorate(Decoration([settings(server)], observer=observer))
        assert server.calls == 2 and observer.calls["site-policy"] == 2
        reviewed = sorted((r["request"]["replicaType"], r["request"]["replicaIndex"])
                          for r in server.requests)  # fmt: skip
    assert reviewed == [("Master", 0), ("Worker", 0)]
    assert decorated.failure == "" and decorated.ignored == []
    for name, pod in pods(decorated).items():
        assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "training"}, name
        assert env(pod)[POOL_ENV] == "training"
        assert env(pod)["RANK"] in ("0", "1", "2")  # the env contract is still there
        sidecar = [c["name"] for c in pod["spec"]["containers"]][1:]
        assert sidecar == (["log-shipper"] if "worker" in name else [])


def test_a_cached_answer_means_no_call_until_the_generation_changes() -> None:
    with policy_server() as server:
        decoration = Decoration([settings(server)])
        first = decorate(decoration)
        again = decorate(decoration)
        assert server.calls == 2
        decorate(decoration, generation=2)
        assert server.calls == 4
    assert pods(first) == pods(again)


def test_a_plan_that_creates_no_pod_calls_no_server() -> None:
    with policy_server() as server:
        job, first = job_and_plan()
        steady = Plan(status=first.status)
        out = Decoration([settings(server)]).decorate(job, REGISTRY.get(job.kind), steady)
        assert server.calls == 0 and out.plan is steady


@pytest.mark.parametrize(
    ("selection", "called"),
    [
        ({"kinds": ["TFJob"]}, False),
        ({"kinds": ["pytorchjob"]}, True),
        ({"objectSelector": {"matchLabels": {"team": "vision"}}}, True),
        ({"objectSelector": {"matchLabels": {"team": "speech"}}}, False),
        ({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}, True),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}},
            False,
        ),
    ],
    ids=lambda v: str(v),
)
def test_a_server_sees_only_the_jobs_its_selectors_choose(
    selection: dict[str, Any], called: bool
) -> None:
    with policy_server() as server:
        decorated = decorate(
            Decoration([settings(server, **selection)]), pytorch_job().labels(team="vision")
        )
        assert (server.calls > 0) is called
    assert (POOL_LABEL in str(pods(decorated))) is called


FAILURES = {
    "down": (None, "unreachable"),
    "slow": (slow(30), "timeout"),
    "garbage": (garbage, "malformed"),
    "huge": (huge, "too_large"),
    "an identity label": (
        patching([{"op": "replace", "path": "/metadata/labels/training.kubeflow.org~1job-name",
                   "value": "other"}]), "forbidden_patch"),
    "the owner references": (
        patching([{"op": "remove", "path": "/metadata/ownerReferences"}]), "forbidden_patch"),
    "the env contract": (
        patching([{"op": "replace", "path": "/spec/containers/0/env/0/value", "value": "9"}]),
        "forbidden_patch"),
    "a shadowed env var": (
        patching([{"op": "add", "path": "/spec/containers/0/env/-",
                   "value": {"name": "MASTER_PORT", "value": "1"}}]), "forbidden_patch"),
    "a removed container": (
        patching([{"op": "remove", "path": "/spec/containers/0"}]), "forbidden_patch"),
    "a path that is not there": (
        patching([{"op": "replace", "path": "/spec/nope/x", "value": 1}]), "patch_failed"),
    "a patch that makes no pod": (
        patching([{"op": "add", "path": "/spec/containers/0/image", "value": {"a": 1}}]),
        "patch_failed"),
}  # fmt: skip


@pytest.fixture(params=list(FAILURES), ids=lambda f: f"a server that is {f}")
def failing(request: pytest.FixtureRequest) -> Any:
    respond, reason = FAILURES[request.param]
    with policy_server(respond) as server:
        if respond is None:
            server.stop()  # a port nobody listens on any more
        yield server, reason


def test_with_failure_policy_fail_nothing_is_created_and_the_job_fails(failing: Any) -> None:
    server, reason = failing
    observer = Observer()
    started = time.monotonic()
    decorated = decorate(Decoration([settings(server, timeoutSeconds=1)], observer=observer))
    assert time.monotonic() - started < 5  # bounded by timeoutSeconds, whatever the server does
    out = decorated.plan
    assert out.create_pods == [] and out.create_services == []
    assert out.status is not None
    failed = out.status.conditions[-1]
    expected = ("Failed", "True", "PyTorchJobFailedDecoration")
    assert (failed.type, failed.status, failed.reason) == expected
    assert '"site-policy"' in (failed.message or "") and "no pod was created" in failed.message
    assert [e.reason for e in out.events if e.type == "Warning"] == ["FailedDecoration"]
    assert observer.failures[("site-policy", reason)] == 1


def test_with_failure_policy_ignore_the_pods_are_created_undecorated(failing: Any) -> None:
    server, _ = failing
    decorated = decorate(Decoration([settings(server, timeoutSeconds=1, failurePolicy="Ignore")]))
    _, undecorated = job_and_plan()
    assert decorated.failure == ""
    assert pods(decorated) == {p["metadata"]["name"]: p for p in undecorated.create_pods}
    assert decorated.plan.create_services == undecorated.create_services
    ignored = [e for e in decorated.plan.events if e.reason == "DecorationIgnored"]
    assert len(ignored) == 2  # one per replica type
    assert all('"site-policy"' in e.message for e in ignored)


def test_a_refusal_fails_the_job_whatever_the_failure_policy() -> None:
    with policy_server(refusing("GPU quota exceeded for team vision")) as server:
        decorated = decorate(Decoration([settings(server, failurePolicy="Ignore")]))
    assert decorated.plan.create_pods == []
    assert "refused the job: GPU quota exceeded" in decorated.failure


def test_the_example_policy_refuses_a_gpu_hog() -> None:
    hog = make_job("PyTorchJob", "d").master().workers(1)
    hog.container("Worker", resources={"limits": {"nvidia.com/gpu": 16}})
    with policy_server() as server:
        decorated = decorate(Decoration([settings(server)]), hog)
    assert "asks 16 GPUs; this site allows 8" in decorated.failure


def test_a_certificate_from_another_ca_is_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with policy_server(tls=tmp_path / "a") as a, policy_server(tls=tmp_path / "b") as b:
        wrong = settings(a, caBundle=settings(b).ca_bundle)
        decorated = decorate(Decoration([wrong]))
    assert "CERTIFICATE_VERIFY_FAILED" in decorated.failure


def test_servers_apply_in_order_each_seeing_the_last_ones_change() -> None:
    add_label = patching([{"op": "add", "path": "/metadata/labels/first", "value": "yes"}])
    with policy_server(add_label) as first, policy_server() as second:
        decorated = decorate(Decoration([settings(first, "first"), settings(second)]))
        seen = second.requests[0]["request"]["object"]["metadata"]["labels"]
    assert seen["first"] == "yes"
    for pod in pods(decorated).values():
        assert pod["metadata"]["labels"]["first"] == "yes"
        assert POOL_LABEL in pod["spec"]["nodeSelector"]
