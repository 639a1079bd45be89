"""Only what is safe is sent twice, as Go's net/http decides for client-go: a write whose answer
was lost is never resent (the server may have applied it), its caller looks for what it wrote;
a read is resent; a kept-alive connection the server closed while idle is replaced before
anything is sent on it. On the real kube-apiserver, the answers lost by the fault proxy after
the server acted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from builders import minimal_job
from opkit import Cluster, RunningOperator, wait_for

from trainop_core.operator.kube import CONFIG_MAPS, ApiError, KubeClient

Start = Callable[..., RunningOperator]


def kept_alive_client(cluster: Cluster) -> KubeClient:
    """The operator's client through the proxy, its connection already open and kept alive (as
    the operator's always are after the first request)."""
    client = KubeClient(cluster.proxy.api_client(cluster.control_plane.admin_token), qps=-1)
    client.list(CONFIG_MAPS, cluster.namespace)
    return client


def config_maps(client: KubeClient, namespace: str, prefix: str) -> list[str]:
    items = client.list(CONFIG_MAPS, namespace)["items"]
    return [c["metadata"]["name"] for c in items if c["metadata"]["name"].startswith(prefix)]


def test_a_create_whose_answer_is_lost_is_sent_once_and_said_to_be_unanswered(
    cluster: Cluster,
) -> None:
    """generateName: a second POST would be a second object, so a replay shows as a duplicate."""
    client, ns = kept_alive_client(cluster), cluster.namespace
    lost = cluster.proxy.lose("create", "configmaps")
    body = {"metadata": {"generateName": "lost-", "namespace": ns}, "data": {"k": "v"}}
    with pytest.raises(ApiError) as raised:
        client.create(CONFIG_MAPS, ns, body)
    assert (raised.value.status, raised.value.answer_lost) == (0, True)
    assert lost.applied == 1
    assert cluster.proxy.stats.requests[("create", "configmaps")] == 1
    assert len(config_maps(client, ns, "lost-")) == 1  # applied once, by the one POST


def test_a_read_whose_answer_is_lost_is_sent_again(cluster: Cluster) -> None:
    client, ns = kept_alive_client(cluster), cluster.namespace
    client.create(CONFIG_MAPS, ns, {"metadata": {"name": "read-me"}, "data": {"k": "v"}})
    lost = cluster.proxy.lose("get", "configmaps")
    assert client.get(CONFIG_MAPS, ns, "read-me")["data"] == {"k": "v"}
    assert lost.applied == 1
    assert cluster.proxy.stats.requests[("get", "configmaps")] == 2


def test_a_connection_the_server_closed_while_idle_is_replaced_before_a_write_is_sent(
    cluster: Cluster,
) -> None:
    """The keep-alive race the old blanket resend covered: nothing was sent, so a write goes out
    on a fresh connection, once, and succeeds."""
    client, ns = kept_alive_client(cluster), cluster.namespace
    cluster.proxy.partition()  # closes every client connection, the idle one too
    cluster.proxy.heal()
    client.create(CONFIG_MAPS, ns, {"metadata": {"generateName": "fresh-"}, "data": {"k": "v"}})
    assert cluster.proxy.stats.requests[("create", "configmaps")] == 1
    assert len(config_maps(client, ns, "fresh-")) == 1


def test_pod_creates_whose_answers_are_lost_are_looked_up_and_the_job_runs(
    cluster: Cluster, run_operator: Start
) -> None:
    """Every pod's create answer lost after the server made it: no pod sent or made twice, no
    error, no FailedCreatePod, and the job runs to the end."""
    lost = cluster.proxy.lose("create", "pods", count=3)
    cluster.rule("*", run_seconds=0.2)
    op = run_operator()
    cluster.create_job(minimal_job("PyTorchJob", "lost").workers(2).build())
    cluster.wait_condition("PyTorchJob", "lost", "Succeeded")
    assert lost.applied == 3
    assert cluster.proxy.stats.requests[("create", "pods")] == 3
    assert {name: n for name, n in cluster.pod_adds.items() if n > 1} == {}
    assert op.manager.metrics.reconcile_errors.value(controller="pytorchjob-controller") == 0
    wait_for(
        lambda: (
            sorted(_named(cluster.events("lost"), "SuccessfulCreatePod"))
            == ["lost-master-0", "lost-worker-0", "lost-worker-1"]
        ),
        what="SuccessfulCreatePod events naming each pod once",
    )
    assert [e for e in cluster.events("lost") if e.reason.startswith("FailedCreate")] == []


def test_pod_deletes_whose_answers_are_lost_are_looked_up_not_sent_again(
    cluster: Cluster, run_operator: Start
) -> None:
    """cleanPodPolicy All deletes every pod of the finished job; each delete's answer is lost:
    each pod is deleted with one request, and no error is reported."""
    lost = cluster.proxy.lose("delete", "pods", count=3)
    cluster.rule("*", run_seconds=0.2)
    op = run_operator()
    job = minimal_job("PyTorchJob", "gone").workers(2).run_policy(cleanPodPolicy="All")
    cluster.create_job(job.build())
    cluster.wait_condition("PyTorchJob", "gone", "Succeeded")
    wait_for(lambda: cluster.pods("gone") == [], what="the finished job's pods deleted")
    assert lost.applied == 3
    assert cluster.proxy.stats.requests[("delete", "pods")] == 3
    assert op.manager.metrics.reconcile_errors.value(controller="pytorchjob-controller") == 0
    assert [e for e in cluster.events("gone") if e.reason.startswith("FailedDelete")] == []


def test_status_writes_whose_answers_are_lost_are_read_back_not_errors(
    cluster: Cluster, run_operator: Start
) -> None:
    """The job's status PUT (guarded by its resourceVersion) may or may not have happened: the
    job is read from the server and planned again, not counted as a failed reconcile."""
    lost = cluster.proxy.lose("update", "pytorchjobs/status", count=2)
    cluster.rule("*", run_seconds=0.2)
    op = run_operator()
    cluster.create_job(minimal_job("PyTorchJob", "status").workers(2).build())
    cluster.wait_condition("PyTorchJob", "status", "Succeeded")
    assert lost.applied == 2
    assert op.manager.metrics.reconcile_errors.value(controller="pytorchjob-controller") == 0


def _named(events: list[Any], reason: str) -> list[str]:
    """The children named by `reason`'s events ("Created pod: a", "Created 3 pods: a, b, c")."""
    return [
        name
        for e in events
        if e.reason == reason
        for name in e.message.split(": ", 1)[1].split(", ")
    ]
