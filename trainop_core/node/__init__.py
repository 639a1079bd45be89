"""A process node: a kubelet that runs the pods bound to it as processes of this machine.

It talks to the API server exactly as a kubelet does and knows nothing of trainop's kinds: it
registers a Node, renews its Lease, watches the pods bound to it, runs their init containers and
containers as processes (``command`` + ``args``; no image is pulled, see :mod:`.images`), with
their env, volumes and resource limits (cgroups), and writes their status. Run one per node as a
process of its own (so that it can be killed like a machine): ``python -m trainop_core.node
--kubeconfig PATH --name NAME``; the try-it cluster (``python -m trainop_core.testing.cluster``)
starts them. See docs/process-node.md.
"""

from __future__ import annotations

from trainop_core.node.node import ProcessNode
from trainop_core.node.registration import NodeConfig

__all__ = ["NodeConfig", "ProcessNode"]
