"""KubernetesBackend against a real HTTP API server: create, get, list, wait, logs, stop, delete."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from backend_cluster import Cluster, wait_for
from builders import make_job

from trainop_core.api.types import ConditionType
from trainop_core.backends.base import LogLine
from trainop_core.backends.kubernetes import AmbiguousJobError, KubernetesBackend
from trainop_core.backends.kubernetes.config import ConfigError
from trainop_core.errors import AlreadyExistsError, JobTimeoutError, NotFoundError
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing import ApiServer

JOBS = {
    "TFJob": lambda name: make_job("TFJob", name).chief().workers(2),
    "PyTorchJob": lambda name: make_job("PyTorchJob", name).master().workers(2),
    "MXJob": lambda name: make_job("MXJob", name).scheduler().servers().workers(),
    "XGBoostJob": lambda name: make_job("XGBoostJob", name).master().workers(),
}


def create(backend: KubernetesBackend, kinds: dict[str, Kind], kind: str, name: str, **ns: str):
    builder = JOBS[kind](name)
    if "namespace" in ns:
        builder = builder.namespace(ns["namespace"])
    return backend.create(builder.job(), kinds[kind])


def condition_types(job) -> list[ConditionType]:
    return [c.type for c in (job.status.conditions if job.status else [])]


# --- create / get / list ------------------------------------------------------------------------
def test_create_stores_the_job_in_the_kubeconfig_context_namespace(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    stored = create(backend, kinds, "PyTorchJob", "mnist")
    assert stored.metadata.uid and stored.metadata.resource_version
    assert stored.namespace == "default"
    on_server = cluster.job("PyTorchJob", "mnist")
    assert set(on_server["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert on_server["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_default_namespace_comes_from_the_chosen_context(
    server: ApiServer,
    cluster: Cluster,
    tmp_path: Path,
    registry: KindRegistry,
    kinds: dict[str, Kind],
) -> None:
    cluster.namespace("team-a")
    path = server.write_kubeconfig(tmp_path / "kc", context="team")
    path.write_text(path.read_text().replace("namespace: default", "namespace: team-a"))
    backend = KubernetesBackend(kubeconfig=path, context="team", registry=registry)
    assert backend.default_namespace == "team-a"
    assert create(backend, kinds, "XGBoostJob", "xgb").namespace == "team-a"
    assert cluster.job("XGBoostJob", "xgb", "team-a")["metadata"]["namespace"] == "team-a"


def test_a_second_create_with_the_same_name_raises_already_exists(
    backend: KubernetesBackend, kinds: dict[str, Kind]
) -> None:
    create(backend, kinds, "TFJob", "dup")
    with pytest.raises(AlreadyExistsError, match="TFJob default/dup"):
        create(backend, kinds, "TFJob", "dup")


def test_get_returns_the_job_with_the_status_the_operator_wrote(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "MXJob", "mx")
    cluster.set_condition("MXJob", "mx", "Created")
    cluster.set_condition("MXJob", "mx", "Running")
    job = backend.get("mx", "default")
    assert job.kind == "MXJob"
    assert condition_types(job) == [ConditionType.CREATED, ConditionType.RUNNING]


def test_get_of_an_unknown_job_raises_not_found(backend: KubernetesBackend) -> None:
    with pytest.raises(NotFoundError, match="default/nope"):
        backend.get("nope", "default")


def test_list_covers_every_kind_in_one_namespace_or_all(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    cluster.namespace("other")
    for kind in JOBS:
        create(backend, kinds, kind, f"{kind.lower()}-a")
    create(backend, kinds, "PyTorchJob", "elsewhere", namespace="other")
    in_default = backend.list("default")
    assert sorted(j.kind for j in in_default) == sorted(JOBS)
    assert [j.name for j in in_default] == sorted(j.name for j in in_default)
    everywhere = backend.list(None)
    assert [j.key for j in everywhere][-1] == "other/elsewhere"
    assert len(everywhere) == len(JOBS) + 1


# --- wait ---------------------------------------------------------------------------------------
def later(seconds: float, action) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()), daemon=True)
    thread.start()
    return thread


def test_wait_returns_the_finished_job_once_it_succeeds(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "PyTorchJob", "w")
    later(0.3, lambda: cluster.set_condition("PyTorchJob", "w", "Running"))
    later(0.6, lambda: cluster.set_condition("PyTorchJob", "w", "Succeeded"))
    job = backend.wait("w", "default", timeout=10)
    assert condition_types(job)[-1] == ConditionType.SUCCEEDED


def test_wait_returns_a_failed_job_too(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "TFJob", "f")
    cluster.set_condition("TFJob", "f", "Failed")
    assert condition_types(backend.wait("f", "default", timeout=5)) == [ConditionType.FAILED]


def test_wait_raises_job_timeout_when_the_job_does_not_finish_in_time(
    backend: KubernetesBackend, kinds: dict[str, Kind]
) -> None:
    create(backend, kinds, "XGBoostJob", "slow")
    started = time.monotonic()
    with pytest.raises(JobTimeoutError, match="default/slow"):
        backend.wait("slow", "default", timeout=1.0)
    assert 0.9 < time.monotonic() - started < 6


def test_wait_resumes_after_the_server_cuts_its_watch(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, server: ApiServer
) -> None:
    create(backend, kinds, "PyTorchJob", "cut")

    def cut_then_finish() -> None:
        wait_for(lambda: server.stats.open_watches > 0)
        server.faults.cut_open_watches()
        wait_for(lambda: server.stats.total_watches >= 2 and server.stats.open_watches > 0)
        cluster.set_condition("PyTorchJob", "cut", "Succeeded")  # seen only by the new watch

    later(0.0, cut_then_finish)
    assert condition_types(backend.wait("cut", "default", timeout=10))[-1] == "Succeeded"


def test_wait_reads_the_job_again_when_its_resource_version_has_expired(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, server: ApiServer
) -> None:
    create(backend, kinds, "PyTorchJob", "gone")
    # The watch request reaches the server only after the job changed and history was compacted,
    # so it starts from a resourceVersion that is too old: 410 Gone, then a fresh read (a LIST,
    # whose resourceVersion is the collection's: watching from it cannot be too old at once).
    server.faults.delay("watch", "pytorchjobs", seconds=0.6)
    lists = lambda: server.stats.requests[("list", "pytorchjobs")]  # noqa: E731 - a tiny probe

    def change_expire_then_finish() -> None:
        wait_for(lambda: lists() >= 1)  # wait() has read the job; its watch is being delayed
        cluster.set_condition("PyTorchJob", "gone", "Running")
        server.faults.expire_history()
        wait_for(lambda: lists() >= 2)  # the 410 made it read the job again
        cluster.set_condition("PyTorchJob", "gone", "Succeeded")

    later(0.0, change_expire_then_finish)
    job = backend.wait("gone", "default", timeout=10)
    assert condition_types(job) == [ConditionType.RUNNING, ConditionType.SUCCEEDED]
    assert lists() == 2  # the first read and the one after the 410
    assert server.stats.total_watches >= 1


def test_wait_for_a_job_deleted_meanwhile_raises_not_found(
    backend: KubernetesBackend, kinds: dict[str, Kind]
) -> None:
    create(backend, kinds, "MXJob", "bye")
    later(0.3, lambda: backend.delete("bye", "default"))
    with pytest.raises(NotFoundError, match="deleted"):
        backend.wait("bye", "default", timeout=10)


# --- logs ---------------------------------------------------------------------------------------
def test_logs_tag_every_line_with_its_replica_master_first(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, server: ApiServer
) -> None:
    create(backend, kinds, "PyTorchJob", "lg")
    for rtype, index in (("Worker", 1), ("Master", 0), ("Worker", 0)):
        pod = cluster.add_pod("PyTorchJob", "lg", rtype, index)
        cluster.kubelet.run("default", pod)
        server.append_pod_log("default", pod, f"hello from {rtype} {index}\n\nbye\n")
    lines = list(backend.logs("lg", "default"))
    assert [line.replica for line in lines[::3]] == ["master-0", "worker-0", "worker-1"]
    assert lines[:3] == [LogLine("master-0", "hello from Master 0"), LogLine("master-0", ""),
                         LogLine("master-0", "bye")]  # fmt: skip
    only = list(backend.logs("lg", "default", replica="worker-1"))
    assert {x.replica for x in only} == {"worker-1"}
    assert only[0].text == "hello from Worker 1"


def test_logs_of_an_unknown_replica_or_job_raise_not_found(
    backend: KubernetesBackend, kinds: dict[str, Kind]
) -> None:
    create(backend, kinds, "PyTorchJob", "lg")
    with pytest.raises(NotFoundError, match="worker-7"):
        list(backend.logs("lg", "default", replica="worker-7"))
    with pytest.raises(NotFoundError):
        list(backend.logs("none", "default"))


def test_following_logs_streams_until_the_job_finished_and_the_pods_ended(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, server: ApiServer
) -> None:
    create(backend, kinds, "XGBoostJob", "fl")
    got: list[LogLine] = []
    reader = threading.Thread(target=lambda: got.extend(backend.logs("fl", "default", follow=True)))
    reader.start()
    master = cluster.add_pod("XGBoostJob", "fl", "Master", 0)
    worker = cluster.add_pod("XGBoostJob", "fl", "Worker", 0)
    for pod in (master, worker):
        cluster.kubelet.run("default", pod)
    server.append_pod_log("default", master, "epoch 1\n")
    wait_for(lambda: LogLine("master-0", "epoch 1") in got)  # streamed while still running
    server.append_pod_log("default", worker, "worker done\n")
    server.append_pod_log("default", master, "epoch 2\n")
    for pod in (master, worker):
        cluster.kubelet.terminate("default", pod, 0)
    assert reader.is_alive()  # the job has not finished yet
    cluster.set_condition("XGBoostJob", "fl", "Succeeded")
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert [x for x in got if x.replica == "master-0"] == [
        LogLine("master-0", "epoch 1"),
        LogLine("master-0", "epoch 2"),
    ]
    assert LogLine("worker-0", "worker done") in got


# --- stop / suspend / delete --------------------------------------------------------------------
def test_stop_records_failed_and_deletes_the_running_pods(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "PyTorchJob", "st")
    cluster.set_condition("PyTorchJob", "st", "Running")
    pod = cluster.add_pod("PyTorchJob", "st", "Master", 0)
    cluster.kubelet.run("default", pod)
    backend.stop("st", "default", "stopped by the user")
    job = backend.get("st", "default")
    assert job.status is not None
    failed = job.status.conditions[-1]
    assert (failed.type, failed.message) == (ConditionType.FAILED, "stopped by the user")
    running = [c for c in job.status.conditions if c.type == ConditionType.RUNNING]
    assert running[0].status == "False"
    assert cluster.pods() == []
    backend.stop("st", "default", "again")  # idempotent: a finished job is left as it is
    assert backend.get("st", "default").status.conditions[-1].message == "stopped by the user"


def test_set_suspended_changes_the_run_policy(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "TFJob", "sus")
    backend.set_suspended("sus", "default", True)
    assert cluster.job("TFJob", "sus")["spec"]["runPolicy"]["suspend"] is True
    backend.set_suspended("sus", "default", False)
    assert backend.get("sus", "default").spec.run_policy.suspend is False


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_delete_removes_the_job_and_its_pods_then_a_second_delete_raises_not_found(
    propagation: str,
    kubeconfig: Path,
    registry: KindRegistry,
    kinds: dict[str, Kind],
    cluster: Cluster,
) -> None:
    backend = KubernetesBackend(kubeconfig=kubeconfig, registry=registry, propagation=propagation)
    create(backend, kinds, "PyTorchJob", "del")
    cluster.add_pod("PyTorchJob", "del", "Master", 0)
    backend.delete("del", "default")
    with pytest.raises(NotFoundError):
        backend.get("del", "default")
    wait_for(lambda: cluster.pods() == [])  # garbage-collected through the owner reference
    with pytest.raises(NotFoundError):
        backend.delete("del", "default")


def test_an_unknown_propagation_is_refused_naming_the_option(kubeconfig: Path) -> None:
    with pytest.raises(Exception, match="propagation"):
        KubernetesBackend(kubeconfig=kubeconfig, propagation="Orphan")


# --- configuration ------------------------------------------------------------------------------
def test_a_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothere"):
        KubernetesBackend(kubeconfig=tmp_path / "nothere")


def test_an_unknown_context_is_a_clear_error(kubeconfig: Path) -> None:
    with pytest.raises(ConfigError, match="elsewhere"):
        KubernetesBackend(kubeconfig=kubeconfig, context="elsewhere")


def test_in_cluster_configuration_outside_a_pod_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="in-cluster"):
        KubernetesBackend(in_cluster=True)


def test_list_fetches_large_collections_page_by_page(
    backend: KubernetesBackend, cluster: Cluster, server: ApiServer
) -> None:
    rt = server.store.resource("tfjobs", "kubeflow.org")
    for i in range(501):  # one more than a page
        server.store.create(rt, "default", make_job("TFJob", f"tf-{i:03d}").workers(1).build())
    jobs = backend.list("default")
    assert len(jobs) == 501
    assert server.stats.requests[("list", "tfjobs")] == 2


def test_a_name_shared_by_two_kinds_is_reported_not_guessed(
    kubeconfig: Path, registry: KindRegistry, server: ApiServer
) -> None:
    for kind, plural in (("TFJob", "tfjobs"), ("PyTorchJob", "pytorchjobs")):
        job = JOBS[kind]("same").build()
        server.store.create(server.store.resource(plural, "kubeflow.org"), "default", job)
    backend = KubernetesBackend(kubeconfig=kubeconfig, registry=registry)
    with pytest.raises(AmbiguousJobError, match="TFJob and PyTorchJob"):
        backend.get("same", "default")


def test_the_client_looks_jobs_up_in_the_context_namespace_when_none_is_given(
    server: ApiServer,
    cluster: Cluster,
    tmp_path: Path,
    registry: KindRegistry,
) -> None:
    from trainop_core.client import TrainingClient

    cluster.namespace("team-a")
    path = server.write_kubeconfig(tmp_path / "kc", context="team")
    path.write_text(path.read_text().replace("namespace: default", "namespace: team-a"))
    client = TrainingClient(KubernetesBackend(kubeconfig=path, context="team", registry=registry))
    client.create(make_job("XGBoostJob", "xgb").master().workers().job())
    assert client.default_namespace == "team-a"
    assert client.get("xgb").namespace == "team-a"
    client.delete("xgb")
    with pytest.raises(NotFoundError):
        client.get("xgb")
