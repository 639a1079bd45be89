"""Test infrastructure shipped like envtest: a fake API server and a kubelet stand-in.

Importing this package needs only the standard library (never ``kubernetes``)::

    from trainop_core.testing import ApiServer, Kubelet, Rule

    with ApiServer() as srv, Kubelet(srv, [Rule("*-worker-*", run_seconds=0.2)]):
        srv.write_kubeconfig("/tmp/kubeconfig")      # for kubectl or another process
        client = srv.api_client()                    # kubernetes.client.ApiClient (lazy import)
        srv.faults.fail("create", "pods", code=500)  # the next pod create fails
        srv.stats.requests[("list", "pods")]         # request counters

Standalone: ``python -m trainop_core.testing.apiserver --port 0 --kubeconfig PATH``.
"""

from __future__ import annotations

from .apiserver import ApiError, ApiServer, FaultRule, Faults, Stats
from .kubelet import Kubelet, Rule

__all__ = ["ApiError", "ApiServer", "FaultRule", "Faults", "Kubelet", "Rule", "Stats"]
