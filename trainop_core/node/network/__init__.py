"""Pod networking for process nodes: an IP and a network namespace per pod on a bridge, cluster
DNS and ClusterIP Services, as root. Knows nothing of trainop's kinds.

    network = ClusterNetwork(rest.connection).start()   # NetworkUnavailable: not root, ...
    sandbox = network.sandbox(namespace, pod_name, uid, hostname, subdomain)
    subprocess.Popen(sandbox.wrap(argv))                 # runs in the pod's network
    sandbox.ip                                           # the pod's status.podIP
    sandbox.close(); network.stop()

See docs/process-node-network.md.
"""

from trainop_core.node.network.cluster import ClusterNetwork
from trainop_core.node.network.errors import NetworkError, NetworkUnavailable
from trainop_core.node.network.sandbox import Sandbox

__all__ = ["ClusterNetwork", "NetworkError", "NetworkUnavailable", "Sandbox"]
