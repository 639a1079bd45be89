"""What the kubelet endpoint (:mod:`trainop_core.node.server`) asks of this node's containers:
their CRI log files, whether they run, and how to exec in one. A view of the node's pods, read
from the endpoint's thread (dictionary reads only: no I/O, no lock held by the sync loop)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainop_core.node import logs
from trainop_core.node.containers import ContainerRun, in_container
from trainop_core.node.podrun import PodRun
from trainop_core.node.remotecommand import ExecCommand


class NodeContainers:
    """The node's containers by (namespace, pod, container) (a ContainerRuntime)."""

    def __init__(self, logs_root: Path) -> None:
        self.logs_root = logs_root
        self.pods: dict[tuple[str, str], tuple[str, PodRun]] = {}  # (ns, name) -> (uid, run)

    def add(self, namespace: str, name: str, uid: str, run: PodRun) -> None:
        self.pods[(namespace, name)] = (uid, run)

    def remove(self, uid: str) -> None:
        for key, (held, _) in list(self.pods.items()):
            if held == uid:
                self.pods.pop(key, None)

    def _find(self, namespace: str, pod: str, container: str) -> tuple[str, ContainerRun] | None:
        found = self.pods.get((namespace, pod))
        if found is None:
            return None
        uid, run = found
        for item in (*run.init, *run.main):
            if item.name == container:
                return uid, item
        return None

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> Sequence[Path] | None:
        found = self._find(namespace, pod, container)
        if found is None:
            return None
        uid, run = found
        attempt = run.restart_count - 1 if previous else run.restart_count
        if attempt < 0 or (previous and not run.runs):
            return None
        directory = logs.pod_log_dir(self.logs_root, namespace, pod, uid)
        return [logs.log_file(directory, container, attempt)]

    def running(self, namespace: str, pod: str, container: str) -> bool:
        found = self._find(namespace, pod, container)
        return found is not None and found[1].log_running

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        found = self._find(namespace, pod, container)
        if found is None or not found[1].alive or found[1].launch is None:
            return None
        run, launch = found[1], found[1].launch
        return ExecCommand(in_container(launch, command), run.env(launch), launch.cwd)
