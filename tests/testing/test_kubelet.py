"""The kubelet stand-in's rules against the real kube-apiserver: restartPolicy, exit codes,
logs (tail, container choice, follow) and many pods at once.

(tests/testing/test_kubelet_api.py covers the node, binding, graceful deletion and kubectl logs.)
"""

from __future__ import annotations

from typing import Any

import pytest

from trainop_core.testing.builders import make_pod, wait_for
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.kubelet import Kubelet, Rule

kubernetes = pytest.importorskip("kubernetes")
ApiException = kubernetes.client.exceptions.ApiException


@pytest.fixture
def core(control_plane: ControlPlane) -> Any:
    api = control_plane.api_client()
    yield kubernetes.client.CoreV1Api(api)
    api.close()


def phase(core: Any, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)


def container(core: Any, namespace: str, name: str) -> Any:
    return core.read_namespaced_pod(name, namespace).status.container_statuses[0]


def accepted(core: Any, namespace: str, name: str) -> bool:
    return bool(core.read_namespaced_pod(name, namespace).status.container_statuses)


@pytest.mark.parametrize(
    ("policy", "exit_code", "phase_after", "restarts"),
    [
        ("Never", 0, "Succeeded", 0),
        ("Never", 1, "Failed", 0),
        ("OnFailure", 1, "Running", 1),
        ("OnFailure", 0, "Succeeded", 0),
        ("Always", 0, "Running", 1),
        ("Always", 2, "Running", 1),
    ],
    ids=[
        "never: success completes",
        "never: failure fails the pod",
        "on failure: non-zero exit restarts in place",
        "on failure: zero exit completes",
        "always: zero exit restarts",
        "always: non-zero exit restarts",
    ],
)
def test_restart_policy_decides_what_an_exit_does(
    core: Any,
    k8s_kubelet: Kubelet,
    k8s_namespace: str,
    policy: str,
    exit_code: int,
    phase_after: str,
    restarts: int,
) -> None:
    ns = k8s_namespace
    core.create_namespaced_pod(ns, make_pod("p", restart_policy=policy))
    wait_for(lambda: accepted(core, ns, "p"), timeout=30)
    k8s_kubelet.run(ns, "p")
    k8s_kubelet.terminate(ns, "p", exit_code=exit_code)
    status = container(core, ns, "p")
    assert phase(core, ns, "p") == phase_after and status.restart_count == restarts
    if restarts:
        assert status.state.running and status.last_state.terminated.exit_code == exit_code


def test_a_rule_runs_matching_pods_to_their_exit_code_and_leaves_others_pending(
    core: Any, k8s_kubelet: Kubelet, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    k8s_kubelet.rules[:] = [
        Rule("*-worker-*", run_seconds=0.05, exit_code=0),
        Rule("*-master-*", run_seconds=0.05, exit_code=3),
    ]
    for name in ("job-worker-0", "job-master-0", "other"):
        core.create_namespaced_pod(ns, make_pod(name))
    wait_for(lambda: phase(core, ns, "job-worker-0") == "Succeeded", timeout=30)
    wait_for(lambda: phase(core, ns, "job-master-0") == "Failed", timeout=30)
    master = container(core, ns, "job-master-0").state.terminated
    assert (master.exit_code, master.reason) == (3, "Error")
    wait_for(lambda: accepted(core, ns, "other"), timeout=30)
    assert phase(core, ns, "other") == "Pending"
    assert container(core, ns, "other").state.waiting.reason == "ContainerCreating"


def test_pod_logs_by_container_with_tail_and_follow(
    core: Any, k8s_kubelet: Kubelet, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    core.create_namespaced_pod(ns, make_pod("p", containers=("a", "b")))
    wait_for(lambda: accepted(core, ns, "p"), timeout=30)
    k8s_kubelet.run(ns, "p")
    k8s_kubelet.append_log(ns, "p", "one\ntwo\nthree\n", "a")
    assert core.read_namespaced_pod_log("p", ns, container="a", tail_lines=2) == "two\nthree\n"
    with pytest.raises(ApiException) as which:  # the API server itself asks which container
        core.read_namespaced_pod_log("p", ns)
    assert which.value.status == 400 and "container name must be specified" in which.value.body
    response = core.read_namespaced_pod_log(
        "p", ns, container="b", follow=True, _preload_content=False
    )
    # Streamed while the pod runs: the first line arrives before the second is even written.
    k8s_kubelet.append_log(ns, "p", "epoch 1\n", "b")
    assert response.readline() == b"epoch 1\n"
    k8s_kubelet.append_log(ns, "p", "epoch 2\n", "b")
    k8s_kubelet.terminate(ns, "p", exit_code=0)
    assert response.read() == b"epoch 2\n"  # and the stream ends with the pod


def test_many_pods_do_not_stall_the_kubelet(
    control_plane: ControlPlane, k8s_kubelet: Kubelet, k8s_namespace: str
) -> None:
    k8s_kubelet.rules[:] = [Rule("*", run_seconds=0.0)]
    path = f"/api/v1/namespaces/{k8s_namespace}/pods"
    for i in range(100):
        control_plane.rest.create(path, make_pod(f"p-{i}"))

    def all_done() -> bool:
        items = control_plane.rest.get(path)["items"]
        return all(p.get("status", {}).get("phase") == "Succeeded" for p in items)

    wait_for(all_done, timeout=120, interval=0.5)
    assert k8s_kubelet.lists == 1
