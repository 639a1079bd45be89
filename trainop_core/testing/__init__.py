"""Test infrastructure shipped like envtest: a real control plane, a fake API server, a kubelet.

Importing this package needs only the standard library (never ``kubernetes``). The real
kube-apiserver + etcd (binaries: ``python -m trainop_core.testing.binaries``)::

    from trainop_core.testing import ControlPlane, Kubelet, Rule

    with ControlPlane() as cp, Kubelet(cp, [Rule("*-worker-*", run_seconds=0.2)]):
        cp.kubeconfig                                # admin kubeconfig for kubectl (0600)
        client = cp.api_client()                     # kubernetes.client.ApiClient (lazy import)

The in-process fake (fault injection, request counters)::

    from trainop_core.testing import ApiServer, Kubelet, Rule

    with ApiServer() as srv, Kubelet(srv, [Rule("*-worker-*", run_seconds=0.2)]):
        srv.write_kubeconfig("/tmp/kubeconfig")      # for kubectl or another process
        client = srv.api_client()                    # kubernetes.client.ApiClient (lazy import)
        srv.faults.fail("create", "pods", code=500)  # the next pod create fails
        srv.stats.requests[("list", "pods")]         # request counters

Standalone: ``python -m trainop_core.testing.cluster`` (the real control plane, the operator and
the kubelet stand-in, for kubectl) or ``python -m trainop_core.testing.apiserver --port 0
--kubeconfig PATH`` (the fake).
"""

from __future__ import annotations

from .apiserver import ApiError, ApiServer, FaultRule, Faults, Stats
from .controlplane import ControlPlane, ControlPlaneError
from .kubelet import Kubelet, Rule

__all__ = [
    "ApiError",
    "ApiServer",
    "ControlPlane",
    "ControlPlaneError",
    "FaultRule",
    "Faults",
    "Kubelet",
    "Rule",
    "Stats",
]
