"""Helpers for the process node's tests: a pod builder and waits on what the nodes write."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainop_core.testing.builders import wait_for
from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.nodes import ProcessNodes
from trainop_core.testing.rest import RestError

Obj = dict[str, Any]


def _load_expectations() -> Any:
    """tests/examples_support/expectations.py (what each example prints), by path: that
    directory is not a package and other test directories load it the same way."""
    path = Path(__file__).resolve().parents[1] / "examples_support" / "expectations.py"
    spec = importlib.util.spec_from_file_location("expectations", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


expectations = _load_expectations()


@dataclass
class NodeCluster:
    cp: ControlPlane
    nodes: ProcessNodes

    def pods(self, ns: str) -> str:
        return f"/api/v1/namespaces/{ns}/pods"

    def create(self, ns: str, pod: Obj) -> Obj:
        created: Obj = self.cp.rest.create(self.pods(ns), pod)
        return created

    def get(self, ns: str, name: str) -> Obj:
        found: Obj = self.cp.rest.get(f"{self.pods(ns)}/{name}")
        return found

    def find(self, ns: str, name: str) -> Obj:
        """The pod, or {} while it does not exist."""
        try:
            return self.get(ns, name)
        except RestError as err:
            if err.status == 404:
                return {}
            raise

    def wait_phase(self, ns: str, name: str, phases: tuple[str, ...], timeout: float = 60) -> Obj:
        def reached() -> Obj | None:
            pod = self.find(ns, name)
            return pod if pod.get("status", {}).get("phase") in phases else None

        found: Obj = wait_for(reached, timeout, interval=0.1)
        return found

    def wait_status(self, ns: str, name: str, check: Any, timeout: float = 60) -> Obj:
        """The pod once `check(container status of its first container)` holds."""

        def reached() -> Obj | None:
            pod = self.find(ns, name)
            statuses = pod.get("status", {}).get("containerStatuses") or []
            return pod if statuses and check(statuses[0]) else None

        found: Obj = wait_for(reached, timeout, interval=0.1)
        return found

    def wait_gone(self, ns: str, name: str, timeout: float = 60) -> None:
        def gone() -> bool:
            try:
                self.get(ns, name)
            except RestError as err:
                return err.status == 404
            return False

        wait_for(gone, timeout, interval=0.1)

    def log(self, ns: str, name: str, container: str = "", previous: bool = False) -> str:
        """The container's log as the node wrote it (CRI records, text only)."""
        pod = self.find(ns, name)
        if not pod.get("spec", {}).get("nodeName"):
            return ""  # not yet scheduled
        uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
        root = self.cp.data_dir / "nodes" / node / "logs" / f"{ns}_{name}_{uid}"
        container = container or pod["spec"]["containers"][0]["name"]
        restarts = [s for s in pod.get("status", {}).get("containerStatuses") or []
                    if s["name"] == container]  # fmt: skip
        count = restarts[0]["restartCount"] if restarts else 0
        path = root / container / f"{count - 1 if previous else count}.log"
        if not path.exists():
            return ""
        lines = path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3)


@dataclass
class PodBuilder:
    """``pod("p").command("python", "-c", "...").env(A="1").build()``."""

    name: str
    restart: str = "Never"
    containers: list[Obj] = field(default_factory=list)
    inits: list[Obj] = field(default_factory=list)
    volumes: list[Obj] = field(default_factory=list)
    extra: Obj = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def command(self, *argv: str, name: str = "main", **container: Any) -> PodBuilder:
        self.containers.append({"name": name, "image": "busybox", "command": list(argv),
                                **container})  # fmt: skip
        return self

    def python(self, source: str, name: str = "main", **container: Any) -> PodBuilder:
        return self.command("python", "-c", source, name=name, **container)

    def init(self, source: str, name: str = "init", **container: Any) -> PodBuilder:
        self.inits.append({"name": name, "image": "busybox", "command": ["python", "-c", source],
                           **container})  # fmt: skip
        return self

    def volume(self, name: str, **source: Any) -> PodBuilder:
        self.volumes.append({"name": name, **source})
        return self

    def policy(self, restart: str) -> PodBuilder:
        self.restart = restart
        return self

    def spec(self, **extra: Any) -> PodBuilder:
        self.extra.update(extra)
        return self

    def build(self) -> Obj:
        spec: Obj = {"restartPolicy": self.restart, "containers": self.containers, **self.extra}
        if self.inits:
            spec["initContainers"] = self.inits
        if self.volumes:
            spec["volumes"] = self.volumes
        meta: Obj = {"name": self.name, "labels": self.labels}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod(name: str) -> PodBuilder:
    return PodBuilder(name)
