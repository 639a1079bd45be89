"""The kubelet stand-in: automatic rules, test-driven transitions, restartPolicy, logs."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from trainop_core.testing import ApiServer, Kubelet, Rule
from trainop_core.testing.builders import make_pod, wait_for

kubernetes = pytest.importorskip("kubernetes")


def phase(core: Any, name: str) -> str:
    return str(core.read_namespaced_pod(name, "default").status.phase)


def container(core: Any, name: str) -> Any:
    return core.read_namespaced_pod(name, "default").status.container_statuses[0]


def test_rules_run_pods_to_completion(server: ApiServer, core: Any) -> None:
    rules = [
        Rule("*-worker-*", run_seconds=0.05, exit_code=0),
        Rule("*-master-*", run_seconds=0.05, exit_code=3),
    ]
    with Kubelet(server, rules):
        for name in ("job-worker-0", "job-master-0", "other"):
            core.create_namespaced_pod("default", make_pod(name))
        wait_for(lambda: phase(core, "job-worker-0") == "Succeeded")
        wait_for(lambda: phase(core, "job-master-0") == "Failed")
        worker = core.read_namespaced_pod("job-worker-0", "default")
        ended = worker.status.container_statuses[0].state.terminated
        assert (
            (ended.exit_code, ended.reason) == (0, "Completed")
            and ended.started_at
            and ended.finished_at
        )
        assert worker.status.pod_ip == "127.0.0.1" and worker.status.start_time
        assert container(core, "job-master-0").state.terminated.reason == "Error"
        assert phase(core, "other") == "Pending"
        assert container(core, "other").state.waiting.reason == "ContainerCreating"


def test_manual_run_and_terminate(core: Any, kubelet: Kubelet) -> None:
    core.create_namespaced_pod("default", make_pod("p", containers=("a", "b")))
    wait_for(lambda: core.read_namespaced_pod("p", "default").status.container_statuses)
    pod = kubelet.run("default", "p")
    assert pod["status"]["phase"] == "Running"
    ready = {c.type: c.status for c in core.read_namespaced_pod("p", "default").status.conditions}
    assert ready["Ready"] == "True" and ready["PodScheduled"] == "True"
    kubelet.terminate("default", "p", exit_code=0, container="a")
    assert phase(core, "p") == "Running"
    kubelet.terminate("default", "p", exit_code=1, container="b")
    assert phase(core, "p") == "Failed"


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
    core: Any, kubelet: Kubelet, policy: str, exit_code: int, phase_after: str, restarts: int
) -> None:
    core.create_namespaced_pod("default", make_pod("p", restart_policy=policy))
    wait_for(lambda: core.read_namespaced_pod("p", "default").status.container_statuses)
    kubelet.run("default", "p")
    kubelet.terminate("default", "p", exit_code=exit_code)
    status = container(core, "p")
    assert phase(core, "p") == phase_after and status.restart_count == restarts
    if restarts:
        assert status.state.running and status.last_state.terminated.exit_code == exit_code


def test_exit_code_sequence_fails_then_succeeds(server: ApiServer, core: Any) -> None:
    with Kubelet(server, [Rule("*", run_seconds=0.02, exit_code=[1, 1, 0])]):
        core.create_namespaced_pod("default", make_pod("p", restart_policy="OnFailure"))
        wait_for(lambda: phase(core, "p") == "Succeeded")
    assert container(core, "p").restart_count == 2


def test_restart_container_and_evict(core: Any, kubelet: Kubelet) -> None:
    core.create_namespaced_pod("default", make_pod("p", restart_policy="Never"))
    wait_for(lambda: core.read_namespaced_pod("p", "default").status.container_statuses)
    kubelet.run("default", "p")
    kubelet.restart_container("default", "p")
    assert container(core, "p").restart_count == 1 and phase(core, "p") == "Running"
    kubelet.evict("default", "p", message="node pressure")
    pod = core.read_namespaced_pod("p", "default")
    assert (pod.status.phase, pod.status.reason) == ("Failed", "Evicted")


def test_pod_logs_with_tail_container_and_follow(
    server: ApiServer, core: Any, kubelet: Kubelet
) -> None:
    core.create_namespaced_pod("default", make_pod("p", containers=("a", "b")))
    wait_for(lambda: core.read_namespaced_pod("p", "default").status.container_statuses)
    with pytest.raises(kubernetes.client.exceptions.ApiException) as waiting:
        core.read_namespaced_pod_log("p", "default", container="a")
    assert waiting.value.status == 400
    assert "is waiting to start: ContainerCreating" in waiting.value.body
    kubelet.run("default", "p")
    server.set_pod_log("default", "p", "one\ntwo\nthree\n", container="a")
    assert (
        core.read_namespaced_pod_log("p", "default", container="a", tail_lines=2) == "two\nthree\n"
    )
    with pytest.raises(kubernetes.client.exceptions.ApiException) as err:
        core.read_namespaced_pod_log("p", "default")
    assert err.value.status == 400
    response = core.read_namespaced_pod_log(
        "p", "default", container="b", follow=True, _preload_content=False
    )

    def produce() -> None:
        server.append_pod_log("default", "p", "epoch 1\n", container="b")
        server.append_pod_log("default", "p", "epoch 2\n", container="b")
        kubelet.terminate("default", "p", exit_code=0)

    threading.Timer(0.05, produce).start()
    assert b"".join(response.stream()) == b"epoch 1\nepoch 2\n"


def test_many_pods_do_not_stall_the_kubelet(server: ApiServer, core: Any) -> None:
    with Kubelet(server, [Rule("*", run_seconds=0.0)]):
        pods = server.store.resource("pods")
        for i in range(300):
            server.store.create(pods, "default", make_pod(f"p-{i}"))
        wait_for(
            lambda: all(
                p["status"].get("phase") == "Succeeded"
                for p in server.store.list(pods, "default").items
            )
        )
