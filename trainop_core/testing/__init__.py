"""Test infrastructure shipped like envtest: a real control plane, a fault proxy, a kubelet.

Importing this package needs only the standard library (never ``kubernetes``). The real
kube-apiserver + etcd (binaries: ``python -m trainop_core.testing.binaries``), a fault-injecting
proxy in front of it for the client under test, and the kubelet stand-in::

    from trainop_core.testing import ControlPlane, FaultProxy, Kubelet, Rule

    with (
        ControlPlane() as cp,
        FaultProxy.for_control_plane(cp) as proxy,
        Kubelet(cp, [Rule("*-worker-*", run_seconds=0.2)]),
    ):
        cp.kubeconfig                                # admin kubeconfig for kubectl (0600)
        client = proxy.api_client(cp.admin_token)    # kubernetes.client.ApiClient (lazy import)
        proxy.fail("create", "pods", code=500)       # the next pod create fails
        proxy.stats.requests[("list", "pods")]       # request counters
        cp.compact_etcd()  # old resourceVersions: 410 Gone (with ControlPlane(watch_cache=False))

Standalone: ``python -m trainop_core.testing.cluster`` (the real control plane, the operator and
the kubelet stand-in, for kubectl).
"""

from __future__ import annotations

from .controlplane import ControlPlane, ControlPlaneError
from .faultproxy import Fault, FaultProxy
from .kubelet import Kubelet, Rule

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "Fault",
    "FaultProxy",
    "Kubelet",
    "Rule",
]
