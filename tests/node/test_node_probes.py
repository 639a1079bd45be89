"""Probes on process nodes, observed through the API only: readiness gates Ready (and the
Service's endpoints), a failing liveness probe restarts the container with events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodekit import NodeCluster, pod

from trainop_core.testing.builders import wait_for

Obj = dict[str, Any]

# Serves HTTP (or accepts TCP) on 8080 once the file GO exists; until then only sleeps.
SERVE_AFTER_GO = """
import os, time, http.server
while not os.path.exists({go!r}):
    time.sleep(0.05)
http.server.ThreadingHTTPServer(("", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def condition(pod_obj: Obj, kind: str) -> str:
    found = [c["status"] for c in pod_obj.get("status", {}).get("conditions") or []
             if c["type"] == kind]  # fmt: skip
    return found[0] if found else ""


def events(node_cluster: NodeCluster, ns: str, name: str, reason: str) -> list[str]:
    answer = node_cluster.cp.rest.get(
        f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={name}"
    )
    return [e["message"] for e in answer.get("items") or [] if e["reason"] == reason]


def wait_event(node_cluster: NodeCluster, ns: str, name: str, reason: str, text: str) -> str:
    def seen() -> str:
        return next((m for m in events(node_cluster, ns, name, reason) if text in m), "")

    found: str = wait_for(seen, timeout=60, interval=0.2)
    return found


def unhealthy_count(node_cluster: NodeCluster, ns: str, name: str) -> int:
    """The `count` of the pod's one Unhealthy event (repeats are counted, not duplicated)."""
    answer = node_cluster.cp.rest.get(
        f"/api/v1/namespaces/{ns}/events", fieldSelector=f"involvedObject.name={name}"
    )
    found = [e for e in answer.get("items") or [] if e["reason"] == "Unhealthy"]
    assert len(found) == 1, found
    return int(found[0].get("count") or 0)


def endpoint_ready(node_cluster: NodeCluster, ns: str, service: str) -> list[bool]:
    answer = node_cluster.cp.rest.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        labelSelector=f"kubernetes.io/service-name={service}",
    )
    return [bool(e.get("conditions", {}).get("ready"))
            for s in answer.get("items") or [] for e in s.get("endpoints") or []]  # fmt: skip


def serving_pod(name: str, go: Path, probe: Obj) -> Obj:
    built = (
        pod(name)
        .policy("Always")
        .python(
            SERVE_AFTER_GO.format(go=str(go)),
            ports=[{"name": "http", "containerPort": 8080}],
            readinessProbe={**probe, "periodSeconds": 1},
        )
    )
    built.labels["app"] = name
    return built.build()


def test_an_http_readiness_probe_makes_the_pod_ready_only_once_its_server_answers(
    node_cluster: NodeCluster, ns: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    probe = {"httpGet": {"port": "http", "path": "/"}}
    node_cluster.create(ns, serving_pod("web", go, probe))
    node_cluster.cp.rest.create(f"/api/v1/namespaces/{ns}/services", {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
    })  # fmt: skip
    failed = wait_event(node_cluster, ns, "web", "Unhealthy", "Readiness probe failed")
    placed = node_cluster.get(ns, "web")
    assert f"{placed['status']['podIP']}:8080" in failed
    assert placed["status"]["phase"] == "Running"
    assert (condition(placed, "Ready"), condition(placed, "ContainersReady")) == ("False", "False")
    assert placed["status"]["containerStatuses"][0]["ready"] is False
    wait_for(lambda: endpoint_ready(node_cluster, ns, "web") == [False], timeout=60, interval=0.2)
    go.touch()
    ready = node_cluster.wait_status(ns, "web", lambda s: s["ready"])
    assert (condition(ready, "Ready"), condition(ready, "ContainersReady")) == ("True", "True")
    assert ready["status"]["containerStatuses"][0]["restartCount"] == 0
    wait_for(lambda: endpoint_ready(node_cluster, ns, "web") == [True], timeout=60, interval=0.2)


def test_a_tcp_readiness_probe_waits_for_the_port_to_accept(
    node_cluster: NodeCluster, ns: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    node_cluster.create(ns, serving_pod("tcp", go, {"tcpSocket": {"port": 8080}}))
    failed = wait_event(node_cluster, ns, "tcp", "Unhealthy", "Readiness probe failed")
    ip = node_cluster.get(ns, "tcp")["status"]["podIP"]
    assert failed == f"Readiness probe failed: dial tcp {ip}:8080: connect: connection refused"
    assert condition(node_cluster.get(ns, "tcp"), "Ready") == "False"
    wait_for(lambda: unhealthy_count(node_cluster, ns, "tcp") >= 2, timeout=60, interval=0.2)
    go.touch()
    ready = node_cluster.wait_status(ns, "tcp", lambda s: s["ready"])
    assert condition(ready, "Ready") == "True"


def test_a_failing_liveness_probe_restarts_the_container_with_unhealthy_and_killing_events(
    node_cluster: NodeCluster, ns: str, tmp_path: Path
) -> None:
    healthy = tmp_path / "healthy"
    source = f"import pathlib, time; pathlib.Path({str(healthy)!r}).touch(); time.sleep(3600)"
    check = f"import os, sys; sys.exit(0 if os.path.exists({str(healthy)!r}) else 1)"
    # a start-up delay so that a run has made its file before its first probe; a long timeout
    # so that a slow machine does not fail the probe for it
    liveness = {"exec": {"command": ["python", "-c", check]}, "initialDelaySeconds": 2,
                "periodSeconds": 1, "timeoutSeconds": 10, "failureThreshold": 1,
                "terminationGracePeriodSeconds": 1}  # fmt: skip
    node_cluster.create(
        ns, pod("alive").policy("Always").python(source, livenessProbe=liveness).build()
    )
    node_cluster.wait_status(ns, "alive", lambda s: s["ready"] and healthy.exists())
    healthy.unlink()  # the probe starts failing; the restarted container makes it pass again
    restarted = node_cluster.wait_status(
        ns, "alive", lambda s: s["restartCount"] == 1 and "running" in s["state"]
    )
    ended = restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert ended["exitCode"] in (137, 143)  # SIGTERM, or SIGKILL after the probe's grace
    wait_event(node_cluster, ns, "alive", "Unhealthy", "Liveness probe failed")
    killing = wait_event(node_cluster, ns, "alive", "Killing", "liveness")
    assert killing == "Container main failed liveness probe, will be restarted"


def test_a_grpc_probe_is_refused_at_start_naming_its_field(
    node_cluster: NodeCluster, ns: str
) -> None:
    probe = {"livenessProbe": {"grpc": {"port": 9000}}}
    node_cluster.create(ns, pod("grpc").python("print('never')", **probe).build())
    waiting = node_cluster.wait_status(ns, "grpc", lambda s: "waiting" in s["state"]
                                       and s["state"]["waiting"].get("message"))  # fmt: skip
    state = waiting["status"]["containerStatuses"][0]["state"]["waiting"]
    assert state["reason"] == "CreateContainerConfigError"
    assert state["message"].startswith("spec.containers[0].livenessProbe.grpc: gRPC probes are")
    failed = wait_event(node_cluster, ns, "grpc", "Failed", "livenessProbe.grpc")
    assert failed == f"Error: {state['message']}"
