"""The kubelet stand-in against a real kube-apiserver: node, binding, status, logs, deletion.

(tests/testing/test_kubelet.py runs its rules against the in-process fake.)
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

import pytest

from trainop_core.testing.builders import make_pod, wait_for
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.kubelet import Kubelet, Rule
from trainop_core.testing.rest import Rest, RestError

Pod = dict[str, Any]


class Pods:
    """The test namespace's pods, as the admin sees them."""

    def __init__(self, rest: Rest, namespace: str) -> None:
        self.rest, self.path = rest, f"/api/v1/namespaces/{namespace}/pods"

    def create(self, pod: Pod) -> Pod:
        return self.rest.create(self.path, pod)

    def get(self, name: str) -> Pod:
        return self.rest.get(f"{self.path}/{name}")

    def phase(self, name: str) -> str:
        return str(self.get(name).get("status", {}).get("phase"))

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except RestError as err:
            if err.status == 404:
                return False
            raise
        return True


@pytest.fixture
def pods(control_plane: ControlPlane, k8s_namespace: str) -> Pods:
    return Pods(control_plane.rest, k8s_namespace)


def kubectl(cp: ControlPlane, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(cp.kubeconfig))
    return subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_rules_bind_run_and_finish_pods_with_one_list(
    control_plane: ControlPlane, k8s_kubelet: Kubelet, pods: Pods
) -> None:
    k8s_kubelet.rules[:] = [
        Rule("ok-*", run_seconds=0.1, exit_code=0),
        Rule("bad-*", run_seconds=0.1, exit_code=3),
    ]
    for name in ("ok-0", "bad-0", "idle"):
        pods.create(make_pod(name))
    wait_for(lambda: pods.phase("ok-0") == "Succeeded", timeout=30)
    wait_for(lambda: pods.phase("bad-0") == "Failed", timeout=30)
    ok = pods.get("ok-0")
    assert ok["spec"]["nodeName"] == k8s_kubelet.node_name
    assert ok["status"]["podIP"] == "127.0.0.1" and ok["status"]["startTime"]
    ended = ok["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (0, "Completed")
    bad = pods.get("bad-0")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (bad["exitCode"], bad["reason"]) == (3, "Error")
    wait_for(lambda: pods.get("idle").get("status", {}).get("containerStatuses"), timeout=30)
    idle = pods.get("idle")
    assert idle["status"]["phase"] == "Pending"
    assert idle["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == (
        "ContainerCreating"
    )
    node = control_plane.rest.get(f"/api/v1/nodes/{k8s_kubelet.node_name}")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert k8s_kubelet.lists == 1


def test_on_failure_restarts_in_place_until_an_attempt_succeeds(
    k8s_kubelet: Kubelet, pods: Pods
) -> None:
    k8s_kubelet.rules[:] = [Rule("*", run_seconds=0.1, exit_code=[1, 1, 0])]
    pods.create(make_pod("p", restart_policy="OnFailure"))
    wait_for(lambda: pods.phase("p") == "Succeeded", timeout=30)
    status = pods.get("p")["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_manual_transitions_are_accepted_by_a_real_server(
    k8s_kubelet: Kubelet, pods: Pods, k8s_namespace: str
) -> None:
    pods.create(make_pod("p", containers=("a", "b"), restart_policy="Never"))
    wait_for(lambda: pods.get("p").get("status", {}).get("containerStatuses"), timeout=30)
    assert k8s_kubelet.run(k8s_namespace, "p")["status"]["phase"] == "Running"
    k8s_kubelet.restart_container(k8s_namespace, "p", container="a")
    assert pods.get("p")["status"]["containerStatuses"][0]["restartCount"] == 1
    k8s_kubelet.terminate(k8s_namespace, "p", exit_code=0, container="a")
    assert pods.phase("p") == "Running"
    evicted = k8s_kubelet.evict(k8s_namespace, "p", message="node pressure")
    assert (evicted["status"]["phase"], evicted["status"]["reason"]) == ("Failed", "Evicted")


def test_kubectl_logs_reads_the_stand_ins_log_endpoint(
    control_plane: ControlPlane, k8s_kubelet: Kubelet, pods: Pods, k8s_namespace: str
) -> None:
    k8s_kubelet.rules[:] = [Rule("*", run_seconds=None, log="one\ntwo\nthree\n")]
    pods.create(make_pod("p"))
    wait_for(lambda: pods.phase("p") == "Running", timeout=30)
    logs = kubectl(control_plane, "logs", "-n", k8s_namespace, "p")
    assert (logs.returncode, logs.stdout) == (0, "one\ntwo\nthree\n"), logs.stderr
    tail = kubectl(control_plane, "logs", "-n", k8s_namespace, "p", "--tail=1")
    assert tail.stdout == "three\n"

    env = dict(os.environ, KUBECONFIG=str(control_plane.kubeconfig))
    command = ["kubectl", "logs", "-n", k8s_namespace, "p", "-f"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as follow:
        assert follow.stdout is not None
        # kubectl follows once it printed what was there; a line written then is streamed.
        assert [follow.stdout.readline() for _ in range(3)] == ["one\n", "two\n", "three\n"]
        k8s_kubelet.append_log(k8s_namespace, "p", "four\n", "main")
        assert follow.stdout.readline() == "four\n"
        k8s_kubelet.terminate(k8s_namespace, "p", exit_code=0)
        assert follow.wait(timeout=60) == 0 and follow.stdout.read() == ""


def test_a_graceful_delete_completes_at_once(
    control_plane: ControlPlane, k8s_kubelet: Kubelet, pods: Pods, k8s_namespace: str
) -> None:
    """A bound pod's deletion waits for its kubelet: the stand-in completes it."""
    k8s_kubelet.rules[:] = [Rule("*", run_seconds=None)]
    pods.create(make_pod("p"))
    wait_for(lambda: pods.phase("p") == "Running", timeout=30)
    started = time.monotonic()
    deleted = kubectl(control_plane, "delete", "pod", "-n", k8s_namespace, "p", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert not pods.exists("p")
    assert time.monotonic() - started < 20  # the default grace period is 30 s


def test_pods_of_another_node_are_left_alone(
    control_plane: ControlPlane, pods: Pods, k8s_namespace: str
) -> None:
    with Kubelet(control_plane, [Rule("*")], namespace=k8s_namespace) as mine:
        other = make_pod("elsewhere")
        other["spec"]["nodeName"] = "some-other-node"
        pods.create(other)
        pods.create(make_pod("here"))
        wait_for(lambda: pods.phase("here") == "Succeeded", timeout=30)
        assert pods.get("elsewhere").get("status", {}).get("phase") == "Pending"
        assert not pods.get("elsewhere")["status"].get("containerStatuses")
        node = mine.node_name
    with pytest.raises(RestError) as gone:
        control_plane.rest.get(f"/api/v1/nodes/{node}")
    assert gone.value.status == 404


class CountingRest(Rest):
    """A Rest that notes its calls to single pods as (method, last path element) pairs."""

    def __init__(self, rest: Rest) -> None:
        super().__init__(rest.url, rest.token, rest.ca_file, user_agent=rest.user_agent)
        self.calls: list[tuple[str, str]] = []
        self._calls_lock = threading.Lock()

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if "/pods/" in path:
            with self._calls_lock:
                self.calls.append((method, path.rsplit("/", 1)[-1]))
        return super().request(method, path, *args, **kwargs)


def test_automatic_transitions_bind_and_patch_without_reading_each_pod(
    control_plane: ControlPlane, pods: Pods, k8s_namespace: str
) -> None:
    """A kubelet writes from what it saw: one binding and three status patches per pod (accept,
    run, exit), no read of a single pod, whatever the number of worker threads."""
    kubelet = Kubelet(control_plane, [Rule("*", run_seconds=0.1)], namespace=k8s_namespace)
    counting = kubelet.rest = CountingRest(kubelet.rest)
    with kubelet:
        names = [f"p{i}" for i in range(6)]
        for name in names:
            pods.create(make_pod(name))
        for name in names:
            wait_for(lambda name=name: pods.phase(name) == "Succeeded", timeout=30)
    pod_calls = counting.calls
    assert sorted(set(pod_calls)) == [("PATCH", "status"), ("POST", "binding")]
    assert pod_calls.count(("POST", "binding")) == len(names)
    assert pod_calls.count(("PATCH", "status")) == 3 * len(names)
    assert pods.get("p0")["spec"]["nodeName"] == kubelet.node_name


def test_a_test_driven_transition_is_not_undone_by_an_automatic_one(
    control_plane: ControlPlane, pods: Pods, k8s_namespace: str
) -> None:
    """The stand-in writes automatic transitions from the pod as it last saw it: a test-driven
    write in between must be what the next automatic one starts from, not an older copy."""
    rules = [Rule("*", run_seconds=1.5)]
    with Kubelet(control_plane, rules, namespace=k8s_namespace, workers=2) as kubelet:
        pods.create(make_pod("p", containers=("a", "b"), restart_policy="Never"))
        wait_for(lambda: pods.phase("p") == "Running", timeout=30)
        kubelet.restart_container(k8s_namespace, "p", container="b")  # before the rule's exit
        wait_for(lambda: pods.phase("p") == "Succeeded", timeout=30)
        statuses = {s["name"]: s for s in pods.get("p")["status"]["containerStatuses"]}
        assert statuses["b"]["restartCount"] == 1
        assert statuses["b"]["lastState"]["terminated"]["exitCode"] == 1
        assert statuses["a"]["state"]["terminated"]["exitCode"] == 0


class StepRest(CountingRest):
    """A Rest that notes the automatic status patches it sends, in order, as (pod, step)."""

    def __init__(self, rest: Rest) -> None:
        super().__init__(rest)
        self.steps: list[tuple[str, str]] = []

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        body = args[0] if args else kwargs.get("body")
        if method == "PATCH" and path.endswith("/status") and body:
            step = "run" if body["status"].get("phase") == "Running" else "accept"
            with self._calls_lock:
                self.steps.append((path.rsplit("/", 2)[-2], step))
        return super().request(method, path, *args, **kwargs)


def test_under_a_backlog_pods_start_in_the_order_they_were_seen(
    control_plane: ControlPlane, pods: Pods, k8s_namespace: str
) -> None:
    """A pod's start is due when the pod was seen (plus the rule's start_seconds), not when its
    accept was written: with one worker and six pods seen at once, the first starts before the
    last is accepted. Were the start queued behind every pod seen meanwhile, an operator that
    creates a job's pods at once would have them started later than one creating them one by
    one (the benchmark's stand-in would favour the slower writer)."""
    names = [f"p{i}" for i in range(6)]
    for name in names:  # before the stand-in starts: its first list sees all six at once
        pods.create(make_pod(name))
    kubelet = Kubelet(control_plane, [Rule("*", run_seconds=None)], namespace=k8s_namespace,
                      workers=1)  # fmt: skip
    recording = kubelet.rest = StepRest(kubelet.rest)
    with kubelet:
        wait_for(lambda: all(pods.phase(name) == "Running" for name in names), timeout=30)
    steps = recording.steps
    assert sorted(steps) == sorted([(n, s) for n in names for s in ("accept", "run")])
    assert steps.index(("p0", "run")) < steps.index(("p5", "accept")), steps
