"""Process nodes: what makes pods really run on the try-it cluster.

A process node is a kubelet that runs the pods bound to it as processes of this machine
(:class:`trainop_core.node.node.ProcessNode`). It talks to the API server exactly as a kubelet
does and knows nothing of trainop's kinds: it registers a Node, renews its Lease, watches the
pods bound to it, runs their init containers and containers as processes (``command`` +
``args``; no image is pulled, see :mod:`trainop_core.node.images`), with their env, volumes and
resource limits (cgroups), and writes their status. Run one per node as a process of its own (so
that it can be killed like a machine): ``python -m trainop_core.node --kubeconfig PATH --name
NAME``; the try-it cluster (``python -m trainop_core.testing.cluster``) starts them. Pod
networking is :mod:`trainop_core.node.network`. See docs/process-node.md.
"""
