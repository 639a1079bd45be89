"""KubernetesBackend against the real kube-apiserver (through the fault proxy): create, get, list,
wait, logs, stop, delete."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from backend_cluster import Cluster, wait_for
from builders import make_job
from k8s import delete_namespace, namespace_name

from trainop_core.api.types import ConditionType
from trainop_core.backends.base import LogLine
from trainop_core.backends.kubernetes import AmbiguousJobError, KubernetesBackend
from trainop_core.backends.kubernetes.config import ConfigError
from trainop_core.errors import AlreadyExistsError, JobTimeoutError, NotFoundError
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.faultproxy import FaultProxy

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


@pytest.fixture
def other_namespace(control_plane: ControlPlane, k8s_namespace: str) -> Iterator[str]:
    name = namespace_name(f"{k8s_namespace[:40]}-other")
    control_plane.ensure_namespace(name)
    yield name
    delete_namespace(control_plane, name)


def team_kubeconfig(proxy: FaultProxy, cp: ControlPlane, path: Path, namespace: str) -> Path:
    """A kubeconfig whose context "team" (also the current one) defaults to `namespace`."""
    proxy.kubeconfig_for(cp.admin_token, path, namespace=namespace)
    config = yaml.safe_load(path.read_text())
    config["contexts"][0]["name"] = config["current-context"] = "team"
    path.write_text(yaml.safe_dump(config))
    return path


# --- create / get / list ------------------------------------------------------------------------
def test_create_stores_the_job_in_the_kubeconfig_context_namespace(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    stored = create(backend, kinds, "PyTorchJob", "mnist")
    assert stored.metadata.uid and stored.metadata.resource_version
    assert stored.namespace == cluster.namespace
    on_server = cluster.job("PyTorchJob", "mnist")
    assert set(on_server["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert on_server["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


def test_default_namespace_comes_from_the_chosen_context(
    k8s_proxy: FaultProxy,
    control_plane: ControlPlane,
    cluster: Cluster,
    other_namespace: str,
    tmp_path: Path,
    registry: KindRegistry,
    kinds: dict[str, Kind],
) -> None:
    path = team_kubeconfig(k8s_proxy, control_plane, tmp_path / "kc", other_namespace)
    backend = KubernetesBackend(kubeconfig=path, context="team", registry=registry)
    assert backend.default_namespace == other_namespace
    assert create(backend, kinds, "XGBoostJob", "xgb").namespace == other_namespace
    stored = cluster.job("XGBoostJob", "xgb", other_namespace)
    assert stored["metadata"]["namespace"] == other_namespace


def test_a_second_create_with_the_same_name_raises_already_exists(
    backend: KubernetesBackend, kinds: dict[str, Kind]
) -> None:
    create(backend, kinds, "TFJob", "dup")
    with pytest.raises(AlreadyExistsError, match=f"TFJob {backend.default_namespace}/dup"):
        create(backend, kinds, "TFJob", "dup")


def test_get_returns_the_job_with_the_status_the_operator_wrote(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "MXJob", "mx")
    cluster.set_condition("MXJob", "mx", "Created")
    cluster.set_condition("MXJob", "mx", "Running")
    job = backend.get("mx", cluster.namespace)
    assert job.kind == "MXJob"
    assert condition_types(job) == [ConditionType.CREATED, ConditionType.RUNNING]


def test_get_of_an_unknown_job_raises_not_found(backend: KubernetesBackend) -> None:
    namespace = backend.default_namespace
    with pytest.raises(NotFoundError, match=f"{namespace}/nope"):
        backend.get("nope", namespace)


def test_list_covers_every_kind_in_one_namespace_or_all(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, other_namespace: str
) -> None:
    for kind in JOBS:
        create(backend, kinds, kind, f"{kind.lower()}-a")
    create(backend, kinds, "PyTorchJob", "elsewhere", namespace=other_namespace)
    in_default = backend.list(cluster.namespace)
    assert sorted(j.kind for j in in_default) == sorted(JOBS)
    assert [j.name for j in in_default] == sorted(j.name for j in in_default)
    mine = (cluster.namespace, other_namespace)  # other tests' jobs may still be being deleted
    everywhere = [j for j in backend.list(None) if j.namespace in mine]
    assert [j.key for j in everywhere] == sorted(j.key for j in everywhere)
    assert f"{other_namespace}/elsewhere" in [j.key for j in everywhere]
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
    job = backend.wait("w", cluster.namespace, timeout=30)
    assert condition_types(job)[-1] == ConditionType.SUCCEEDED


def test_wait_returns_a_failed_job_too(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "TFJob", "f")
    cluster.set_condition("TFJob", "f", "Failed")
    got = backend.wait("f", cluster.namespace, timeout=30)
    assert condition_types(got) == [ConditionType.FAILED]


def test_wait_raises_job_timeout_when_the_job_does_not_finish_in_time(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "XGBoostJob", "slow")
    started = time.monotonic()
    with pytest.raises(JobTimeoutError, match=f"{cluster.namespace}/slow"):
        backend.wait("slow", cluster.namespace, timeout=1.0)
    assert 0.9 < time.monotonic() - started < 10


def test_wait_resumes_after_the_server_cuts_its_watch(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, k8s_proxy: FaultProxy
) -> None:
    create(backend, kinds, "PyTorchJob", "cut")
    stats = k8s_proxy.stats

    def cut_then_finish() -> None:
        wait_for(lambda: stats.open_watches > 0)
        assert k8s_proxy.cut_open_watches() == 1
        wait_for(lambda: stats.total_watches >= 2 and stats.open_watches > 0)
        cluster.set_condition("PyTorchJob", "cut", "Succeeded")  # seen only by the new watch

    later(0.0, cut_then_finish)
    got = backend.wait("cut", cluster.namespace, timeout=30)
    assert condition_types(got)[-1] == "Succeeded"
    assert stats.total_watches == 2


def test_wait_reads_the_job_again_when_its_resource_version_was_compacted(
    compactable_plane: ControlPlane, registry: KindRegistry, kinds: dict[str, Kind], tmp_path: Path
) -> None:
    """The watch request reaches the server only after the job changed and etcd compacted its
    history, so it starts from a resourceVersion that is gone: a real 410, then a fresh read
    (a LIST, whose resourceVersion is the collection's: watching from it cannot fail at once)."""
    cp, namespace = compactable_plane, namespace_name("backend-410")
    cp.ensure_namespace(namespace)
    cluster = Cluster(cp, namespace, registry)
    with FaultProxy.for_control_plane(cp) as proxy:
        kubeconfig = proxy.kubeconfig_for(cp.admin_token, tmp_path / "kc", namespace=namespace)
        backend = KubernetesBackend(kubeconfig=kubeconfig, registry=registry)
        create(backend, kinds, "PyTorchJob", "gone")
        proxy.delay("watch", "pytorchjobs", seconds=2)
        lists = lambda: proxy.stats.requests[("list", "pytorchjobs")]  # noqa: E731 - a tiny probe

        def change_compact_then_finish() -> None:
            wait_for(lambda: lists() >= 1)  # wait() has read the job; its watch is being delayed
            cluster.set_condition("PyTorchJob", "gone", "Running")
            cluster.touch()
            cp.compact_etcd()
            wait_for(lambda: lists() >= 2)  # the 410 made it read the job again
            cluster.set_condition("PyTorchJob", "gone", "Succeeded")

        later(0.0, change_compact_then_finish)
        job = backend.wait("gone", namespace, timeout=30)
        assert condition_types(job) == [ConditionType.RUNNING, ConditionType.SUCCEEDED]
        assert lists() == 2  # the first read and the one after the 410
        assert proxy.stats.requests[("watch", "pytorchjobs")] == 2  # the 410, then the good one


def test_wait_for_a_job_deleted_meanwhile_raises_not_found(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "MXJob", "bye")
    deleting = later(0.3, lambda: backend.delete("bye", cluster.namespace))
    with pytest.raises(NotFoundError, match="deleted"):
        backend.wait("bye", cluster.namespace, timeout=30)
    deleting.join(30)


# --- logs ---------------------------------------------------------------------------------------
def test_logs_tag_every_line_with_its_replica_master_first(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    ns = cluster.namespace
    create(backend, kinds, "PyTorchJob", "lg")
    for rtype, index in (("Worker", 1), ("Master", 0), ("Worker", 0)):
        pod = cluster.add_pod("PyTorchJob", "lg", rtype, index)
        cluster.kubelet.run(ns, pod)
        cluster.append_log("PyTorchJob", pod, f"hello from {rtype} {index}\n\nbye\n")
    lines = list(backend.logs("lg", ns))
    assert [line.replica for line in lines[::3]] == ["master-0", "worker-0", "worker-1"]
    assert lines[:3] == [LogLine("master-0", "hello from Master 0"), LogLine("master-0", ""),
                         LogLine("master-0", "bye")]  # fmt: skip
    only = list(backend.logs("lg", ns, replica="worker-1"))
    assert {x.replica for x in only} == {"worker-1"}
    assert only[0].text == "hello from Worker 1"


def test_logs_of_an_unknown_replica_or_job_raise_not_found(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "PyTorchJob", "lg")
    with pytest.raises(NotFoundError, match="worker-7"):
        list(backend.logs("lg", cluster.namespace, replica="worker-7"))
    with pytest.raises(NotFoundError):
        list(backend.logs("none", cluster.namespace))


def test_following_logs_streams_until_the_job_finished_and_the_pods_ended(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    ns = cluster.namespace
    create(backend, kinds, "XGBoostJob", "fl")
    got: list[LogLine] = []
    reader = threading.Thread(target=lambda: got.extend(backend.logs("fl", ns, follow=True)))
    reader.start()
    master = cluster.add_pod("XGBoostJob", "fl", "Master", 0)
    worker = cluster.add_pod("XGBoostJob", "fl", "Worker", 0)
    for pod in (master, worker):
        cluster.kubelet.run(ns, pod)
    cluster.append_log("XGBoostJob", master, "epoch 1\n")
    wait_for(lambda: LogLine("master-0", "epoch 1") in got)  # streamed while still running
    cluster.append_log("XGBoostJob", worker, "worker done\n")
    cluster.append_log("XGBoostJob", master, "epoch 2\n")
    for pod in (master, worker):
        cluster.kubelet.terminate(ns, pod, 0)
    assert reader.is_alive()  # the job has not finished yet
    cluster.set_condition("XGBoostJob", "fl", "Succeeded")
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert [x for x in got if x.replica == "master-0"] == [
        LogLine("master-0", "epoch 1"),
        LogLine("master-0", "epoch 2"),
    ]
    assert LogLine("worker-0", "worker done") in got


def test_logs_with_tail_start_at_each_pods_last_lines_then_follow(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    ns = cluster.namespace
    create(backend, kinds, "XGBoostJob", "tl")
    master = cluster.add_pod("XGBoostJob", "tl", "Master", 0)
    cluster.kubelet.run(ns, master)
    cluster.append_log("XGBoostJob", master, "a\nb\nc\n")
    assert [x.text for x in backend.logs("tl", ns, tail=2)] == ["b", "c"]
    got: list[LogLine] = []
    follow = lambda: got.extend(backend.logs("tl", ns, follow=True, tail=1))  # noqa: E731
    reader = threading.Thread(target=follow)
    reader.start()
    wait_for(lambda: LogLine("master-0", "c") in got)
    cluster.append_log("XGBoostJob", master, "d\n")
    wait_for(lambda: LogLine("master-0", "d") in got)
    cluster.kubelet.terminate(ns, master, 0)
    cluster.set_condition("XGBoostJob", "tl", "Succeeded")
    reader.join(timeout=30)
    assert [x.text for x in got] == ["c", "d"]


def test_replicas_and_events_of_a_job(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    ns = cluster.namespace
    job = create(backend, kinds, "PyTorchJob", "ev")
    for rtype, index in (("Worker", 1), ("Master", 0)):
        cluster.kubelet.run(ns, cluster.add_pod("PyTorchJob", "ev", rtype, index))
    pods = backend.replicas("ev", ns)
    assert [(p.replica_type, p.index, p.phase) for p in pods] == [
        ("Master", 0, "Running"),
        ("Worker", 1, "Running"),
    ]
    involved = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ev"}
    involved.update(namespace=ns, uid=str(job.metadata.uid))
    for n, reason in enumerate(("SuccessfulCreatePod", "JobRestarting")):
        event = {
            "metadata": {"name": f"ev.{n}"},
            "involvedObject": involved,
            "type": "Normal",
            "reason": reason,
            "message": f"said {n}",
            "lastTimestamp": f"2026-01-01T00:00:0{n}Z",
        }
        cluster.rest.create(f"/api/v1/namespaces/{ns}/events", event)
    events = backend.events("ev", ns)
    assert [(e.reason, e.message, e.time) for e in events] == [
        ("SuccessfulCreatePod", "said 0", "2026-01-01T00:00:00Z"),
        ("JobRestarting", "said 1", "2026-01-01T00:00:01Z"),
    ]
    with pytest.raises(NotFoundError):
        backend.events("none", ns)


def test_a_pod_listing_whose_answer_breaks_off_is_a_backend_error(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster, k8s_proxy: FaultProxy
) -> None:
    """Not urllib3's ProtocolError escaping the backend: its own ApiError, naming what failed."""
    from trainop_core.backends.kubernetes.errors import ApiError

    create(backend, kinds, "PyTorchJob", "cut")
    cluster.add_pod("PyTorchJob", "cut", "Master", 0)
    k8s_proxy.cut_answer("list", "pods")
    with pytest.raises(ApiError, match=f"pods of {cluster.namespace}/cut"):
        list(backend.logs("cut", cluster.namespace))
    assert k8s_proxy.stats.faults[("list", "pods", "cut")] == 1


# --- stop / suspend / delete --------------------------------------------------------------------
def test_stop_records_failed_and_deletes_the_running_pods(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    ns = cluster.namespace
    create(backend, kinds, "PyTorchJob", "st")
    cluster.set_condition("PyTorchJob", "st", "Running")
    pod = cluster.add_pod("PyTorchJob", "st", "Master", 0)
    cluster.kubelet.run(ns, pod)
    backend.stop("st", ns, "stopped by the user")
    job = backend.get("st", ns)
    assert job.status is not None
    failed = job.status.conditions[-1]
    assert (failed.type, failed.message) == (ConditionType.FAILED, "stopped by the user")
    running = [c for c in job.status.conditions if c.type == ConditionType.RUNNING]
    assert running[0].status == "False"
    assert cluster.pods() == []  # deleted, and the kubelet stand-in finished the deletion
    backend.stop("st", ns, "again")  # idempotent: a finished job is left as it is
    assert backend.get("st", ns).status.conditions[-1].message == "stopped by the user"


def test_set_suspended_changes_the_run_policy(
    backend: KubernetesBackend, kinds: dict[str, Kind], cluster: Cluster
) -> None:
    create(backend, kinds, "TFJob", "sus")
    backend.set_suspended("sus", cluster.namespace, True)
    assert cluster.job("TFJob", "sus")["spec"]["runPolicy"]["suspend"] is True
    backend.set_suspended("sus", cluster.namespace, False)
    assert backend.get("sus", cluster.namespace).spec.run_policy.suspend is False


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
    backend.delete("del", cluster.namespace)
    if propagation == "Foreground":  # the job went only after its pod
        assert cluster.pods() == []
    with pytest.raises(NotFoundError):
        backend.get("del", cluster.namespace)
    wait_for(lambda: cluster.pods() == [])  # kube-controller-manager follows the owner reference
    with pytest.raises(NotFoundError):
        backend.delete("del", cluster.namespace)


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


def test_kubeconfig_set_after_the_kubernetes_package_was_loaded_is_the_one_used(
    kubeconfig: Path, registry: KindRegistry, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubernetes package reads $KUBECONFIG once, on import; a process that sets it later
    (a test, a notebook, a pipeline step's wrapper) must still get that cluster."""
    import kubernetes.config  # noqa: F401 -- loaded before $KUBECONFIG names our cluster

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    backend = KubernetesBackend(registry=registry)
    assert backend.default_namespace == cluster.namespace
    assert backend.list(cluster.namespace) == []


def test_in_cluster_configuration_outside_a_pod_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="in-cluster"):
        KubernetesBackend(in_cluster=True)


def test_list_fetches_large_collections_page_by_page(
    backend: KubernetesBackend, cluster: Cluster, k8s_proxy: FaultProxy
) -> None:
    jobs = [make_job("TFJob", f"tf-{i:03d}").workers(1).build() for i in range(501)]
    with ThreadPoolExecutor(4) as pool:  # one more than a page
        list(pool.map(cluster.create_job, jobs))
    listed = backend.list(cluster.namespace)
    assert len(listed) == 501
    assert k8s_proxy.stats.requests[("list", "tfjobs")] == 2


def test_a_name_shared_by_two_kinds_is_reported_not_guessed(
    backend: KubernetesBackend, cluster: Cluster
) -> None:
    for kind in ("TFJob", "PyTorchJob"):
        cluster.create_job(JOBS[kind]("same").build())
    with pytest.raises(AmbiguousJobError, match="TFJob and PyTorchJob"):
        backend.get("same", cluster.namespace)


def test_the_client_looks_jobs_up_in_the_context_namespace_when_none_is_given(
    k8s_proxy: FaultProxy,
    control_plane: ControlPlane,
    other_namespace: str,
    tmp_path: Path,
    registry: KindRegistry,
) -> None:
    from trainop_core.client import TrainingClient

    path = team_kubeconfig(k8s_proxy, control_plane, tmp_path / "kc", other_namespace)
    client = TrainingClient(KubernetesBackend(kubeconfig=path, context="team", registry=registry))
    client.create(make_job("XGBoostJob", "xgb").master().workers().job())
    assert client.default_namespace == other_namespace
    assert client.get("xgb").namespace == other_namespace
    client.delete("xgb")
    with pytest.raises(NotFoundError):
        client.get("xgb")
