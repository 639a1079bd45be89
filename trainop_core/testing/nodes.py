"""Process nodes (:mod:`trainop_core.node`) on a test control plane, each a process of its own.

``ProcessNodes(cp, count=2)`` starts ``python -m trainop_core.node`` per node through
:meth:`ControlPlane.spawn` (so the plane's watchdog stops them with it, and each logs to
``<data_dir>/node-<name>.log``) and waits until every Node is Ready. Given a started
:class:`~trainop_core.node.network.ClusterNetwork` (``network=``), each node's pods join it (a
network namespace each, an address from the node's slice, cluster DNS); without one they share
this machine's network. Given a :class:`~trainop_core.node.pki.KubeletPki` directory
(``kubelet_pki=``, the one the plane was started with: ``ControlPlane(kubelet_pki=...)``), each
node serves its kubelet endpoint, so ``kubectl logs`` and ``kubectl exec`` reach its containers
through kube-apiserver. :meth:`kill` SIGKILLs one (a lost machine), :meth:`start` starts one
again. Use with ``ControlPlane(scheduler=True)`` so that
pods are bound to them; ``node_monitor_grace`` makes a killed node's lease expiry count.

The try-it cluster's containers of the images the examples name (:data:`EXAMPLE_IMAGES`: the
examples image ``ghcr.io/trainop/examples``, upstream's XGBoost iris image, ``python``) start in a
directory holding every script of ``examples/`` (:func:`examples_image`), as those images' WORKDIR
would hold the example's script.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .controlplane import ControlPlane, ControlPlaneError

EXAMPLES_IMAGE = "ghcr.io/trainop/examples"
#: the images `examples/` names whose containers run the example's script from their WORKDIR
EXAMPLE_IMAGES = (EXAMPLES_IMAGE, "docker.io/kubeflow/xgboost-dist-iris", "docker.io/python")
REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def examples_image(target: Path, examples: Path = REPO_EXAMPLES) -> Path:
    """A directory standing in for the examples image: a link to every file of each example
    directory (``examples/*/*``), as the image's WORKDIR holds them. Returns `target`."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(examples.glob("*/*")):
        link = target / path.name
        if path.is_file() and not link.exists():
            link.symlink_to(path.resolve())
    return target


def example_roots(target: Path) -> dict[str, str]:
    """Image reference -> root directory for every image of :data:`EXAMPLE_IMAGES`, all
    :func:`examples_image` at `target` (``ProcessNodes(images=...)``)."""
    root = str(examples_image(target))
    return dict.fromkeys(EXAMPLE_IMAGES, root)


class ProcessNodes:
    """`count` process nodes named ``<prefix>-<i>`` on `cp`; see the module docstring."""

    def __init__(
        self,
        cp: ControlPlane,
        count: int = 2,
        *,
        prefix: str = "node",
        heartbeat: float = 2.0,
        images: Mapping[str, str] | None = None,
        network: Any = None,
        kubelet_pki: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.cp = cp
        self.names = [f"{prefix}-{i}" for i in range(count)]
        self.heartbeat = heartbeat
        self.images = dict(images or {})
        self.network = network  # a started ClusterNetwork the nodes' pods join, or None
        self.kubelet_pki = kubelet_pki  # a KubeletPki directory: nodes serve logs and exec
        self.extra_args = list(extra_args)

    def start(self, name: str | None = None, timeout: float = 60.0) -> ProcessNodes:
        """Start every node (or `name`) and wait until each is Ready."""
        for node in [name] if name else self.names:
            self.cp.spawn(f"node-{node}", self._argv(node))
        for node in [name] if name else self.names:
            self.cp.wait_ready(f"node-{node}", lambda n=node: self.ready(n), timeout)  # type: ignore[misc]  # a bound default
        return self

    def _argv(self, name: str) -> list[str]:
        argv = [sys.executable, "-m", "trainop_core.node", f"--kubeconfig={self.cp.kubeconfig}",
                f"--name={name}", f"--root={self.cp.data_dir / 'nodes' / name}",
                f"--heartbeat-seconds={self.heartbeat:g}", *self.extra_args]  # fmt: skip
        argv += [f"--image={ref}={path}" for ref, path in self.images.items()]
        if self.kubelet_pki is not None:
            argv.append(f"--kubelet-pki={self.kubelet_pki}")
        if self.network is not None:
            from trainop_core.node.podnet import HubAddress, node_slice

            pods = str(self.network.pod_network)
            mine = node_slice(pods, self.names.index(name))
            argv += HubAddress(self.network.hub, pods, mine, self.network.zone).args()
        return argv

    def ready(self, name: str) -> bool:
        """Is Node `name` registered with Ready True (and its lease renewed by this run)?"""
        try:
            node = self.cp.rest.get(f"/api/v1/nodes/{name}")
        except Exception:  # not yet registered (404), or the server is busy
            return False
        conditions = node.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def kill(self, name: str) -> None:
        """SIGKILL node `name`'s kubelet (its containers die with it, as on a lost machine)."""
        process = self.cp.processes.pop(f"node-{name}")
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        for name in self.names:
            self.cp.stop_process(f"node-{name}", grace=15.0)

    def __enter__(self) -> ProcessNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_node_condition(cp: ControlPlane, name: str, status: str, timeout: float) -> dict[str, Any]:
    """Wait until Node `name`'s Ready condition has `status` ("True", "False", "Unknown")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = cp.rest.get(f"/api/v1/nodes/{name}")
        for condition in node.get("status", {}).get("conditions") or []:
            if condition["type"] == "Ready" and condition["status"] == status:
                return node
        time.sleep(0.2)
    raise ControlPlaneError(f"node {name} not Ready={status} after {timeout:.0f} s")
