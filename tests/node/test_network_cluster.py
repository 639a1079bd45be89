"""Pod networking against the real control plane: Services, EndpointSlices and Pods are created
directly (no kubelet), processes run inside sandboxes, and names resolve through cluster DNS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from trainop_core.node.network import (
    ClusterNetwork,
    NetworkError,
    NetworkUnavailable,
    Sandbox,
    netns,
)
from trainop_core.testing.builders import wait_for
from trainop_core.testing.controlplane import ControlPlane

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-pod networks need root (CI is)")

Obj = dict[str, Any]
ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        conn.sendall(socket.gethostname().encode() + b":" + data.upper())
        conn.close()
""")
ECHO_CLIENT = textwrap.dedent("""
    import socket, sys
    conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    conn.sendall(b"hello")
    conn.shutdown(socket.SHUT_WR)
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    print(data.decode())
""")
COUNT_ADDRESSES = (
    "import socket, sys; print(len({a[4][0] for a in socket.getaddrinfo(sys.argv[1], 80, "
    "socket.AF_INET, socket.SOCK_STREAM)}))"
)


# --- builders ------------------------------------------------------------------------------------
def service(name: str, *, headless: bool = False, port: int = 80, target: int = 8080) -> Obj:
    spec: Obj = {"ports": [{"name": "main", "port": port, "targetPort": target}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"metadata": {"name": name}, "spec": spec}


def endpoint_slice(service: str, *endpoints: tuple[str, str, bool], port: int = 8080) -> Obj:
    """EndpointSlice of `service`: (address, hostname, ready) per endpoint."""
    items = [
        {"addresses": [ip], **({"hostname": host} if host else {}), "conditions": {"ready": ok}}
        for ip, host, ok in endpoints
    ]
    return {
        "metadata": {
            "generateName": f"{service}-",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": items,
        "ports": [{"name": "main", "port": port, "protocol": "TCP"}],
    }


class Cluster:
    """One test's namespace on the shared control plane and network."""

    def __init__(self, cp: ControlPlane, network: ClusterNetwork, namespace: str) -> None:
        self.cp, self.network, self.namespace = cp, network, namespace
        self.processes: list[subprocess.Popen[str]] = []

    def service(self, body: Obj) -> Obj:
        return self.cp.rest.create(f"/api/v1/namespaces/{self.namespace}/services", body)

    def endpoints(self, body: Obj) -> Obj:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        return self.cp.rest.create(path, body)

    def pod(self, name: str, hostname: str, subdomain: str, ip: str, ready: bool) -> None:
        pods = f"/api/v1/namespaces/{self.namespace}/pods"
        spec = {"hostname": hostname, "subdomain": subdomain,
                "containers": [{"name": "main", "image": "none"}]}  # fmt: skip
        made = self.cp.rest.create(pods, {"metadata": {"name": name}, "spec": spec})
        condition = {"type": "Ready", "status": "True" if ready else "False"}
        made["status"] = {"phase": "Running", "podIP": ip, "conditions": [condition]}
        self.cp.rest.replace(f"{pods}/{name}/status", made)

    def sandbox(self, name: str, **names: str) -> Sandbox:
        return self.network.sandbox(self.namespace, name, f"uid-{self.namespace}-{name}", **names)

    def serve(self, sandbox: Sandbox, port: int = 8080) -> None:
        argv = sandbox.wrap([sys.executable, "-c", ECHO_SERVER, str(port)])
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.processes.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"

    def run(self, sandbox: Sandbox, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(sandbox.wrap(list(argv)), capture_output=True, text=True, timeout=30)

    def python(self, sandbox: Sandbox, code: str, *args: str) -> str:
        """What `code` prints in the sandbox ("" if it failed)."""
        done = self.run(sandbox, sys.executable, "-c", code, *args)
        return done.stdout.strip() if done.returncode == 0 else ""

    def lookup(self, sandbox: Sandbox, name: str) -> list[str]:
        """The addresses `name` has inside the sandbox (getent: resolv.conf's search path)."""
        done = self.run(sandbox, "getent", "ahostsv4", name)
        return sorted({line.split()[0] for line in done.stdout.splitlines()})

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def network(control_plane: ControlPlane) -> Iterator[ClusterNetwork]:
    with ClusterNetwork(control_plane.rest.connection) as network:
        yield network


@pytest.fixture
def cluster(
    control_plane: ControlPlane, network: ClusterNetwork, k8s_namespace: str
) -> Iterator[Cluster]:
    cluster = Cluster(control_plane, network, k8s_namespace)
    yield cluster
    cluster.close()


# --- DNS ---------------------------------------------------------------------------------------
def test_pods_resolve_services_and_pod_hostnames_by_short_names(cluster: Cluster) -> None:
    a = cluster.sandbox("a", hostname="w-0", subdomain="workers")
    b = cluster.sandbox("b")
    cluster.service(service("workers", headless=True))
    cluster.endpoints(endpoint_slice("workers", (a.ip, "w-0", True), ("10.244.9.9", "w-9", False)))
    cluster.pod("c", hostname="w-1", subdomain="workers", ip="10.244.9.1", ready=True)
    web = cluster.service(service("web"))

    assert wait_for(lambda: cluster.lookup(b, "workers"), timeout=30) == [a.ip]
    assert cluster.lookup(b, "w-0.workers") == [a.ip]
    assert wait_for(lambda: cluster.lookup(b, "w-1.workers"), timeout=30) == ["10.244.9.1"]
    assert wait_for(lambda: cluster.lookup(b, "web"), timeout=30) == [web["spec"]["clusterIP"]]
    assert cluster.lookup(b, f"web.{cluster.namespace}.svc.cluster.local") == [
        web["spec"]["clusterIP"]
    ]
    assert cluster.lookup(b, "w-9.workers") == []
    assert cluster.lookup(b, "nothing-here") == []


def test_a_pod_has_its_hostname_hosts_file_and_search_path(cluster: Cluster) -> None:
    a = cluster.sandbox("a", hostname="w-0", subdomain="workers")
    fqdn = f"w-0.workers.{cluster.namespace}.svc.cluster.local"
    assert cluster.run(a, "hostname").stdout.strip() == "w-0"
    assert f"{a.ip}\t{fqdn}\tw-0" in cluster.run(a, "cat", "/etc/hosts").stdout
    resolv = cluster.run(a, "cat", "/etc/resolv.conf").stdout
    assert f"search {cluster.namespace}.svc.cluster.local svc.cluster.local" in resolv
    assert f"nameserver {cluster.network.dns_ip}" in resolv


def test_a_long_answer_reaches_the_pod_whole_over_tcp(cluster: Cluster) -> None:
    b = cluster.sandbox("b")
    cluster.service(service("many", headless=True))
    many = [(f"10.244.8.{i}", "", True) for i in range(1, 61)]
    cluster.endpoints(endpoint_slice("many", *many))
    assert wait_for(lambda: cluster.python(b, COUNT_ADDRESSES, "many"), timeout=30) == "60"


def test_hostile_packets_leave_the_server_answering(cluster: Cluster) -> None:
    b = cluster.sandbox("b")
    hostile = textwrap.dedent("""
        import socket, sys
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        header = bytes([0, 9, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])
        for packet in (header + b"\\xc0\\x0c\\0\\1\\0\\1", b"\\xff" * 4000, b"\\0", header):
            s.sendto(packet, (sys.argv[1], 53))
        t = socket.create_connection((sys.argv[1], 53))
        t.sendall(b"\\xff\\xff" + b"x" * 100)  # claims 64 KiB, sends 100 bytes, leaves
        t.close()
        print("sent")
    """)
    assert cluster.python(b, hostile, cluster.network.dns_ip) == "sent"
    assert cluster.lookup(b, "kubernetes.default") == ["10.0.0.1"]


# --- TCP between pods and through Services --------------------------------------------------------
def test_pods_talk_tcp_to_each_other_by_name(cluster: Cluster) -> None:
    a = cluster.sandbox("a", hostname="w-0", subdomain="workers")
    b = cluster.sandbox("b")
    cluster.service(service("workers", headless=True))
    cluster.endpoints(endpoint_slice("workers", (a.ip, "w-0", True)))
    cluster.serve(a)
    reply = wait_for(lambda: cluster.python(b, ECHO_CLIENT, "w-0.workers", "8080"), timeout=30)
    assert reply == "w-0:HELLO"


def test_a_cluster_ip_service_leads_to_a_ready_endpoint(cluster: Cluster) -> None:
    a = cluster.sandbox("a")
    b = cluster.sandbox("b")
    cluster.service(service("echo", port=80, target=8080))
    cluster.endpoints(endpoint_slice("echo", (a.ip, "", True), ("10.244.7.7", "", False)))
    cluster.service(service("idle", port=80))
    cluster.serve(a)
    assert wait_for(lambda: cluster.python(b, ECHO_CLIENT, "echo", "80"), timeout=30) == "a:HELLO"
    assert cluster.python(b, ECHO_CLIENT, "idle", "80") == ""  # no endpoint: the connection ends


def test_the_kubernetes_service_leads_to_the_api_server(
    cluster: Cluster, control_plane: ControlPlane, tmp_path: Path
) -> None:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    reader = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": "trainop-net-test-pod-reader"}, "rules": [rule]}  # fmt: skip
    try:
        control_plane.rest.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", reader)
    except Exception as exc:  # already made by an earlier run on this control plane
        assert "AlreadyExists" in str(exc)
    token = control_plane.service_account_token(
        cluster.namespace, "robot", cluster_roles=["trainop-net-test-pod-reader"]
    )
    cluster.pod("visible", hostname="v", subdomain="none", ip="10.244.6.6", ready=False)
    b = cluster.sandbox("b")
    done = cluster.run(
        b, "kubectl", "--server=https://kubernetes.default.svc", f"--token={token}",
        f"--certificate-authority={control_plane.ca_file}", "--kubeconfig=/dev/null",
        "-n", cluster.namespace, "get", "pods", "-o", "name",
    )  # fmt: skip
    assert done.stdout.strip() == "pod/visible", done.stderr


# --- sandboxes ---------------------------------------------------------------------------------
def test_a_wrapped_command_keeps_its_pid_and_one_sandbox_serves_a_pod(cluster: Cluster) -> None:
    a = cluster.sandbox("a")
    assert cluster.sandbox("a") is a
    process = subprocess.Popen(a.wrap(["sh", "-c", "echo $$"]), stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=30)
    assert int(out) == process.pid  # signals sent to the process reach the pod's program


def test_a_pod_asked_for_from_many_threads_at_once_gets_one_sandbox(cluster: Cluster) -> None:
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: cluster.sandbox("a"), range(4)))
    assert all(sandbox is made[0] for sandbox in made)


def test_stop_leaves_no_namespace_link_or_file(control_plane: ControlPlane) -> None:
    network = ClusterNetwork(control_plane.rest.connection).start()
    first = network.sandbox("ns", "a", "uid-a")
    network.sandbox("ns", "b", "uid-b")
    first.close()
    links = netns.ip("-o", "link", netns=network.hub)
    assert "vp1@" in links and "vp0@" not in links  # a closed sandbox's veth is gone at once
    network.stop()
    assert [n for n in netns.netns_names() if n.startswith(f"{netns.PREFIX}{network.owner}-")] == []
    assert not network.state_dir.exists()
    assert not list(netns.ETC_NETNS.glob(f"{netns.PREFIX}{network.owner}-*"))


def test_a_sandbox_that_cannot_be_plumbed_leaves_nothing(control_plane: ControlPlane) -> None:
    with ClusterNetwork(control_plane.rest.connection) as network:
        netns.ip("link", "add", "vp0", "type", "bridge", netns=network.hub)  # the name it wants
        with pytest.raises(NetworkError, match="vp0"):
            network.sandbox("ns", "a", "uid-a")
        mine = [n for n in netns.netns_names() if n.startswith(f"{netns.PREFIX}{network.owner}-")]
        assert mine == [network.hub]
        assert not list(network.state_dir.glob("uts-*"))
        assert network.sandbox("ns", "a", "uid-a").ip.startswith("10.244.")


def test_what_a_crashed_owner_left_is_removed() -> None:
    dead = next(p for p in range(4_000_000, 4_100_000) if not Path(f"/proc/{p}").exists())
    names = [f"{netns.PREFIX}{dead}-0-hub", f"{netns.PREFIX}{dead}-0-p3"]
    for name in names:
        netns.add_netns(name)
    netns.write_etc(names[1], {"hosts": "x"})
    netns.new_uts(netns.STATE_DIR / f"{dead}-0" / "uts-p3", "left-behind")
    removed = netns.remove_stale()
    assert sorted(removed) == sorted(names)
    assert not (netns.STATE_DIR / f"{dead}-0").exists()
    assert not (netns.ETC_NETNS / names[1]).exists()


def test_without_root_start_refuses_saying_why(control_plane: ControlPlane) -> None:
    network = ClusterNetwork(control_plane.rest.connection, euid=lambda: 1000)
    with pytest.raises(NetworkUnavailable, match=r"need root.*runs as uid 1000"):
        network.start()
    assert not [n for n in netns.netns_names() if n.startswith(f"{netns.PREFIX}{network.owner}-")]
