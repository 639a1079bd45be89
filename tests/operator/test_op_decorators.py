"""The operator decorates pods from one configuration (`--decorators`): in-process decorators in
the planner, decorator servers in its effects layer, on the real kube-apiserver. The pods it
creates are the ones `trainop render` shows for the same configuration; a steady job costs the
decorator server nothing; a failing server fails the job (Fail) or is skipped (Ignore), and
never leaves a half-created job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from decorator_servers import (
    POOL_ENV,
    POOL_LABEL,
    config_file,
    garbage,
    huge,
    patching,
    policy_server,
    slow,
)
from opkit import Cluster, RunningOperator, wait_for

from trainop_core.api.validation import prepare_all
from trainop_core.cli.render_cmd import render_objects
from trainop_core.decorators import load_decorator_config

Start = Callable[..., RunningOperator]


def configuration(tmp_path: Path, server: Any, **fields: Any) -> str:
    return str(config_file(tmp_path, server, **{"timeoutSeconds": 1, **fields}))


def rendered(job: dict[str, Any], namespace: str, config: str) -> dict[str, Any]:
    """The pods `trainop render -n NAMESPACE --decorators CONFIG` shows, by name."""
    jobs = prepare_all(job)
    objects = render_objects(jobs, namespace=namespace, decorators=load_decorator_config(config))
    return {i["metadata"]["name"]: i for i in objects["items"] if i["kind"] == "Pod"}


def test_pods_are_decorated_as_render_shows_and_a_steady_job_makes_no_call(
    cluster: Cluster, run_operator: Start, tmp_path: Path
) -> None:
    job = make_job("PyTorchJob", "deco").master().workers(2).run_policy(cleanPodPolicy="None")
    job.replica("Worker", 2, restart_policy="ExitCode")
    with policy_server() as server:
        config = configuration(tmp_path, server)
        shown = rendered(job.build(), cluster.namespace, config)
        render_calls = server.calls
        op = run_operator(decorators=config).wait_started()
        cluster.rule("*", run_seconds=None)
        cluster.create_job(job.build())
        pods = wait_for(lambda: len(found := cluster.pods("deco")) == 3 and found, what="3 pods")
        assert server.calls - render_calls == 2  # one per replica type
        for pod in pods:
            spec = cluster.api.sanitize_for_serialization(pod)["spec"]
            expected = shown[pod.metadata.name]["spec"]
            assert spec["nodeSelector"] == expected["nodeSelector"] == {POOL_LABEL: "training"}
            assert spec["containers"][0]["env"] == expected["containers"][0]["env"]
            names = [c["name"] for c in spec["containers"]]
            assert names == [c["name"] for c in expected["containers"]]
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            assert (env["SITE"], env[POOL_ENV]) == ("lab", "training")
        # A worker that fails with a retryable code is re-created: the same generation, no call.
        first_uid = next(p.metadata.uid for p in pods if p.metadata.name == "deco-worker-1")
        cluster.terminate("deco-worker-1", exit_code=137)
        wait_for(
            lambda: any(
                p.metadata.name == "deco-worker-1" and p.metadata.uid != first_uid
                for p in cluster.pods("deco")
            ),
            what="worker re-created",
        )
        recreated = next(p for p in cluster.pods("deco") if p.metadata.name == "deco-worker-1")
        assert recreated.spec.node_selector == {POOL_LABEL: "training"}
        assert server.calls - render_calls == 2
    metrics = op.get("/metrics")[1]
    assert 'trainop_decorator_requests_total{server="site-policy"} 2' in metrics


FAILURES = {
    "down": None,
    "slow": slow(30),
    "garbage": garbage,
    "huge": huge,
    "patching an identity label": patching(
        [{"op": "replace", "path": "/metadata/labels/training.kubeflow.org~1replica-index",
          "value": "7"}]),
}  # fmt: skip


@pytest.mark.parametrize("failure", list(FAILURES), ids=lambda f: f"a decorator server {f}")
def test_with_failure_policy_fail_the_job_fails_and_nothing_is_created(
    cluster: Cluster, run_operator: Start, tmp_path: Path, failure: str
) -> None:
    with policy_server(FAILURES[failure]) as server:
        if FAILURES[failure] is None:
            server.stop()
        run_operator(decorators=configuration(tmp_path, server)).wait_started()
        cluster.create_job(make_job("PyTorchJob", "f").master().workers(1).build())
        cluster.wait_condition("PyTorchJob", "f", "Failed")
    failed = [c for c in cluster.get_job("PyTorchJob", "f")["status"]["conditions"]
              if c["type"] == "Failed"]  # fmt: skip
    assert failed[0]["reason"] == "PyTorchJobFailedDecoration"
    assert 'decorator server "site-policy"' in failed[0]["message"]
    wait_for(lambda: "FailedDecoration" in {e.reason for e in cluster.events("f")}, what="event")
    assert cluster.pods("f") == [] and cluster.services("f") == []
    assert sum(cluster.pod_adds.values()) == 0


def test_with_failure_policy_ignore_pods_are_created_undecorated_with_an_event(
    cluster: Cluster, run_operator: Start, tmp_path: Path
) -> None:
    with policy_server() as server:
        config = configuration(tmp_path, server, failurePolicy="Ignore")
        server.stop()
        run_operator(decorators=config).wait_started()
        cluster.create_job(make_job("PyTorchJob", "i").master().workers(1).build())
        pods = wait_for(lambda: len(found := cluster.pods("i")) == 2 and found, what="2 pods")
    for pod in pods:
        assert not pod.spec.node_selector
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["SITE"] == "lab" and POOL_ENV not in env  # in-process still ran
    wait_for(
        lambda: "DecorationIgnored" in {e.reason for e in cluster.events("i")}, what="an event"
    )
    assert "Failed" not in cluster.conditions("PyTorchJob", "i")
