"""A node's kubelet killed: its containers die with it; restarted, it leaves no orphan and runs
nothing twice; lost for good, kube-controller-manager marks it and the operator's job gets its
pods back on the other node. These kill one of the session's two nodes and start it again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_job
from k8s import fast_operator_options
from nodekit import NodeCluster, pod

from trainop_core.testing.builders import wait_for
from trainop_core.testing.nodes import wait_node_condition

OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                  "effect": "NoExecute"}  # fmt: skip
# The container starts a grandchild in a session of its own (out of reach of the kubelet's
# parent-death signal) and prints both pids, then waits.
ORPHANING = (
    "import os, subprocess, time\n"
    "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "print('pids', os.getpid(), child.pid, flush=True)\n"
    "time.sleep(600)"
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def restarted_nodes(node_cluster: NodeCluster) -> Iterator[NodeCluster]:
    """The session's nodes, each started again after the test if it killed it."""
    yield node_cluster
    for name in node_cluster.nodes.names:
        if f"node-{name}" not in node_cluster.cp.processes:
            node_cluster.nodes.start(name)
        node = node_cluster.cp.rest.get(f"/api/v1/nodes/{name}")
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != OUT_OF_SERVICE["key"]]
        node_cluster.cp.rest.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints}})
    for name in node_cluster.nodes.names:
        wait_for(lambda n=name: node_cluster.nodes.ready(n), 60, interval=0.2)  # type: ignore[misc]


def test_a_restarted_node_kills_what_its_pods_left_and_restarts_them_in_place(
    restarted_nodes: NodeCluster, ns: str
) -> None:
    cluster = restarted_nodes
    cluster.create(ns, pod("survivor").policy("OnFailure").python(ORPHANING).build())
    wait_for(lambda: "pids" in cluster.log(ns, "survivor"), 60, interval=0.1)
    main, grandchild = (int(p) for p in cluster.log(ns, "survivor").split()[1:3])
    node = cluster.get(ns, "survivor")["spec"]["nodeName"]
    cluster.nodes.kill(node)
    wait_for(lambda: not alive(main), 10, interval=0.05)  # it died with its kubelet
    cluster.nodes.start(node)
    wait_for(lambda: not alive(grandchild), 30, interval=0.1)  # the new kubelet killed it
    again = cluster.wait_status(ns, "survivor", lambda s: s["restartCount"] == 1
                                and "running" in s["state"])  # fmt: skip
    assert again["spec"]["nodeName"] == node
    wait_for(lambda: "pids" in cluster.log(ns, "survivor"), 60, interval=0.1)
    new_pids = {int(p) for p in cluster.log(ns, "survivor").split()[1:3]}
    assert main not in new_pids
    # one run only: what carries the pod's marker is the new run's process and its grandchild
    assert {p for p in _marked(again["metadata"]["uid"]) if alive(p)} == new_pids


def _marked(uid: str) -> list[int]:
    """Pids whose environment carries the pod's marker (at most one run's processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    environ = handle.read()
            except OSError:
                continue
            if f"TRAINOP_POD_UID={uid}/".encode() in environ:
                found.append(int(entry))
    return found


@pytest.mark.slow
def test_a_lost_nodes_job_pods_are_replaced_on_the_other_node(
    restarted_nodes: NodeCluster, ns: str, registry: Any
) -> None:
    from clusters import running_operator

    cluster, rest = restarted_nodes, restarted_nodes.cp.rest
    rest.create(f"/api/v1/namespaces/{ns}/configmaps",
                {"metadata": {"name": "pace"}, "data": {"SECONDS": "600"}})  # fmt: skip
    source = (
        "import os, time; print('on', os.environ['NODE'], flush=True)\n"
        "time.sleep(float(os.environ['SECONDS'])); print('done')"
    )
    job = make_job("PyTorchJob", "lost").namespace(ns).master(1, restart_policy="OnFailure")
    job.command(["python", "-c", source]).container(
        "Master",
        env=[{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        envFrom=[{"configMapRef": {"name": "pace"}}],
    )
    jobs = f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
    options = fast_operator_options(ns)
    with running_operator(cluster.cp, registry, options):
        rest.create(jobs, job.build())
        first = cluster.wait_status(ns, "lost-master-0", lambda s: "running" in s["state"], 90)
        lost = first["spec"]["nodeName"]
        rest.patch(f"/api/v1/namespaces/{ns}/configmaps/pace", {"data": {"SECONDS": "0"}})
        cluster.nodes.kill(lost)
        wait_node_condition(cluster.cp, lost, "Unknown", 60)
        # What an administrator does for a machine known to be gone (non-graceful node
        # shutdown): its pods are force-deleted by the pod garbage collector.
        taints = rest.get(f"/api/v1/nodes/{lost}")["spec"].get("taints") or []
        rest.patch(f"/api/v1/nodes/{lost}", {"spec": {"taints": [*taints, OUT_OF_SERVICE]}})

        def replaced() -> bool:
            again = cluster.find(ns, "lost-master-0")
            return bool(again) and again["metadata"]["uid"] != first["metadata"]["uid"]

        wait_for(replaced, 120, interval=0.5)
        done = cluster.wait_phase(ns, "lost-master-0", ("Succeeded",), 120)
        assert done["spec"]["nodeName"] != lost
        conditions = {
            c["type"]: c["status"] for c in rest.get(f"{jobs}/lost")["status"]["conditions"]
        }
        wait_for(lambda: _succeeded(rest, f"{jobs}/lost"), 60, interval=0.5)
        assert conditions


def _succeeded(rest: Any, path: str) -> bool:
    conditions = rest.get(path).get("status", {}).get("conditions") or []
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)
