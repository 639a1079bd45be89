"""A pod's network: its address, and how to run a process inside it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SandboxSpec:
    """Who the sandbox is for (a pod's namespace, name and uid, and its DNS names)."""

    namespace: str
    pod_name: str
    uid: str
    hostname: str
    subdomain: str


class Sandbox:
    """A pod's own network namespace (`netns`, under /run/netns) with address `ip`, its own
    resolv.conf and hosts file, and hostname. Thread-safe; `close()` is idempotent."""

    def __init__(
        self,
        spec: SandboxSpec,
        ip: str,
        netns: str,
        uts: Path,
        hub_link: str,
        release: Callable[[Sandbox], None],
    ) -> None:
        self.spec, self.ip, self.netns, self.uts, self.hub_link = spec, ip, netns, uts, hub_link
        self._release = release
        self._lock = threading.Lock()
        self.closed = False

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run in the pod's network (and hostname), with the pod's /etc/resolv.conf and
        /etc/hosts bind-mounted in a private mount namespace (``ip netns exec``). Both tools
        exec the next program, so the process started is `argv`'s (same pid; signals reach it)."""
        return ["nsenter", f"--uts={self.uts}", "--", "ip", "netns", "exec", self.netns, *argv]

    def close(self) -> None:
        """Remove the pod's namespace, veth and files. Processes still inside lose the network:
        stop them first."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._release(self)

    def __repr__(self) -> str:
        return (
            f"Sandbox({self.spec.namespace}/{self.spec.pod_name}, ip={self.ip}, netns={self.netns})"
        )


def resolv_conf(namespace: str, zone: str, nameserver: str) -> str:
    search = f"{namespace}.svc.{zone} svc.{zone} {zone}"
    return f"search {search}\nnameserver {nameserver}\noptions ndots:5\n"


def hosts_file(spec: SandboxSpec, ip: str, zone: str) -> str:
    """As a kubelet writes it: localhost, then the pod's own names."""
    names = spec.hostname
    if spec.subdomain:
        names = f"{spec.hostname}.{spec.subdomain}.{spec.namespace}.svc.{zone}\t{spec.hostname}"
    return (
        "# Kubernetes-managed hosts file (process node).\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        f"{ip}\t{names}\n"
    )
