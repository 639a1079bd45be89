"""The node's own objects: its Node (capacity, labels, addresses, Ready) and its Lease.

Pure builders, and the two writes a kubelet makes about itself: register (create the Node or
take over an existing one, then write its status) and renew its Lease in ``kube-node-lease``,
which kube-controller-manager's node lifecycle reads to tell a live node from a lost one.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from trainop_core.testing.rest import Rest, RestError

Obj = dict[str, Any]
LEASE_NAMESPACE = "kube-node-lease"
VERSION = "trainop-process-node"


@dataclass(frozen=True)
class NodeConfig:
    """What the node says about itself."""

    name: str
    cpu: str = field(default_factory=lambda: str(os.cpu_count() or 1))
    memory: str = field(default_factory=lambda: host_memory())
    #: the size of the filesystem holding the node's directory (a kubelet's nodefs)
    ephemeral_storage: str = field(default_factory=lambda: host_storage(tempfile.gettempdir()))
    pods: int = 110
    address: str = "127.0.0.1"  # InternalIP: where the API server reaches the kubelet
    port: int = 0  # the kubelet endpoint's port (0: none served)
    lease_seconds: int = 40
    pod_cidr: str = ""  # spec.podCIDR: the node's slice of the pod network, if it has one
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods),
                "ephemeral-storage": self.ephemeral_storage}  # fmt: skip


def host_storage(path: str | os.PathLike[str]) -> str:
    """The size of the filesystem holding `path`, as a quantity: what pods' ephemeral-storage
    requests (upstream's kubectl-delivery asks 5Gi) are scheduled against."""
    try:
        return f"{shutil.disk_usage(path).total // 1024}Ki"
    except OSError:
        return "10Gi"


def host_memory() -> str:
    """This machine's memory as a quantity (MemTotal of /proc/meminfo)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1])}Ki"
    except OSError:
        pass
    return "4Gi"


def rfc3339(micro: bool = False) -> str:
    now = time.time()
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return text + (f".{int(now % 1 * 1e6):06d}Z" if micro else "Z")


def node_object(config: NodeConfig) -> Obj:
    labels = {
        "kubernetes.io/hostname": config.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": _arch(),
        **config.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": config.name, "labels": labels},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]} if (cidr := config.pod_cidr) else {},
        "status": node_status(config),
    }


def node_status(config: NodeConfig) -> Obj:
    now = rfc3339()
    return {
        "capacity": config.allocatable,
        "allocatable": config.allocatable,
        "addresses": [
            {"type": "InternalIP", "address": config.address},
            {"type": "Hostname", "address": config.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.port}},
        "conditions": [
            {"type": kind, "status": "False", "reason": f"KubeletHasSufficient{kind[:-8]}",
             "lastHeartbeatTime": now, "lastTransitionTime": now}
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ] + [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "trainop process node is posting ready status",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "nodeInfo": {
            "architecture": _arch(), "operatingSystem": "linux", "kubeletVersion": VERSION,
            "kubeProxyVersion": "", "containerRuntimeVersion": "trainop-process://1",
            "bootID": "", "machineID": "", "systemUUID": "", "kernelVersion": platform.release(),
            "osImage": "trainop process node",
        },
    }  # fmt: skip


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def register(rest: Rest, config: NodeConfig) -> Obj:
    """Create the Node (or take over one of that name) and write its status: Ready."""
    node = node_object(config)
    try:
        rest.create("/api/v1/nodes", node)
    except RestError as err:
        if err.status != 409:
            raise
        rest.patch(f"/api/v1/nodes/{config.name}", {"metadata": node["metadata"]})
        # spec.podCIDR cannot change once set: a node re-registering keeps its slice.
    # A merge patch: the node lifecycle controller may change the Node meanwhile (taints).
    written: Obj = rest.patch(f"/api/v1/nodes/{config.name}/status", {"status": node["status"]})
    return written


def lease_object(config: NodeConfig, node_uid: str) -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": config.name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": config.name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": config.name,
            "leaseDurationSeconds": config.lease_seconds,
            "renewTime": rfc3339(micro=True),
        },
    }


def renew_lease(rest: Rest, config: NodeConfig, node_uid: str) -> None:
    """Create or renew the node's Lease (renewTime now)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
    lease = lease_object(config, node_uid)
    try:
        rest.patch(f"{path}/{config.name}", {"spec": lease["spec"]})
    except RestError as err:
        if err.status != 404:
            raise
        rest.create(path, lease)


def ensure_ready(rest: Rest, config: NodeConfig) -> None:
    """Write Ready again if someone else (the node lifecycle) set it otherwise."""
    node = rest.get(f"/api/v1/nodes/{config.name}")
    conditions = node["status"].get("conditions") or []
    ready: Obj = next((c for c in conditions if c["type"] == "Ready"), {})
    if ready.get("status") != "True":
        rest.patch(f"/api/v1/nodes/{config.name}/status", {"status": node_status(config)})
