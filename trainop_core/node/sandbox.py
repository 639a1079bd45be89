"""What the kubelet needs of pod networking: a sandbox per pod with an IP and a way in.

:class:`PodNetwork` is implemented by the cluster network (``trainop_core.node.network``: a
network namespace per pod on a bridge, cluster DNS); :class:`HostNetwork` is the fallback
without it (no root): every pod shares this machine's network, with pod IP 127.0.0.1, so names
of Services and pods do not resolve inside pods and two pods cannot listen on one port.
"""

from __future__ import annotations

import socket
from typing import Protocol

HOST_IP = "127.0.0.1"


class Sandbox(Protocol):
    """One pod's network: its IP, and how to start a process inside it."""

    ip: str

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run inside the pod's network (pure: no process is started)."""
        ...

    def close(self) -> None:
        """Remove the pod's network. Idempotent; may do I/O."""
        ...


class PodNetwork(Protocol):
    """Makes pod sandboxes (:class:`trainop_core.node.podnet.NodeNetwork` on the cluster
    network)."""

    def sandbox(
        self, namespace: str, pod_name: str, uid: str, hostname: str, subdomain: str
    ) -> Sandbox:
        """The sandbox of pod `uid` (made, or the one made before for it). May do I/O."""
        ...

    def stop(self) -> None:
        """Remove every sandbox left (at the node's clean stop). Idempotent; may do I/O."""
        ...

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        """A TCP connection from the node to `host` (a pod's IP) on the pod network, as a
        kubelet's probes open them. Blocks at most `timeout` seconds; raises OSError."""
        ...


class HostSandbox:
    """A pod in the host's network."""

    ip = HOST_IP

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

    def close(self) -> None:
        pass


class HostNetwork:
    """Every pod in the host's network (pod IP 127.0.0.1)."""

    def sandbox(
        self, namespace: str, pod_name: str, uid: str, hostname: str, subdomain: str
    ) -> Sandbox:
        return HostSandbox()

    def stop(self) -> None:
        pass

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return socket.create_connection((host, port), timeout=timeout)
