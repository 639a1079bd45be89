"""The operator's ClusterRole grants what the operator uses, and nothing else.

Two derivations, both from the operator itself: the resources its code declares (the REST
resources in `trainop_core.operator.kube` plus one per enabled kind), and every request it really
sends while running jobs of every kind to completion and TTL deletion, with leader election and
gang scheduling on, against the in-process API server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_job
from clusters import install_crds, running_operator
from deploy_manifests import find, kustomize

from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.operator import kube
from trainop_core.operator.options import LeaseTimings, Options
from trainop_core.testing import ApiServer, Kubelet, Rule

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
PLUGINS_SCHEDULER = "scheduler-plugins-scheduler"


def granted() -> set[Grant]:
    role = find(kustomize("base"), "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def declared_resources(registry: KindRegistry) -> set[tuple[str, str]]:
    """(group, plural) of every REST resource the operator's code can address."""
    resources = {(r.group, r.plural) for r in vars(kube).values() if isinstance(r, kube.Resource)}
    jobs = {("kubeflow.org", k.plural) for k in registry.kinds}
    statuses = {("kubeflow.org", f"{k.plural}/status") for k in registry.kinds}
    return resources | jobs | statuses


def test_the_role_names_exactly_the_resources_the_operator_code_declares() -> None:
    registry = build_registry(entry_points=False)
    in_role = {(group, resource) for group, resource, _ in granted()}
    assert in_role == declared_resources(registry)


def test_the_role_has_no_wildcards_and_no_secrets() -> None:
    for group, resource, verb in granted():
        assert "*" not in (group, resource, verb)
        assert resource not in ("secrets", "configmaps", "pods/exec", "roles", "rolebindings")


# --- every request a running operator sends -------------------------------------------------------
def pod_group_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
        "spec": {
            "group": "scheduling.x-k8s.io",
            "scope": "Namespaced",
            "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                      "singular": "podgroup"},
            "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip


JOBS = {
    "TFJob": make_job("TFJob", "tf").chief().workers(1),
    "PyTorchJob": make_job("PyTorchJob", "pt").master().workers(1),
    "MXJob": make_job("MXJob", "mx").scheduler().servers().workers(),
    "XGBoostJob": make_job("XGBoostJob", "xgb").master().workers(1),
    "JAXJob": make_job("JAXJob", "j", replica_field="jaxReplicaSpecs", container="jax").workers(2),
}


@pytest.fixture
def cluster(registry: KindRegistry) -> Iterator[ApiServer]:
    with ApiServer(bookmark_interval=0.5) as server, Kubelet(server, [Rule(run_seconds=0.2)]):
        install_crds(server, registry, extra=[pod_group_crd()])
        yield server


def operator_options() -> Options:
    return Options(
        gang_scheduler_name=PLUGINS_SCHEDULER,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        leader_elect=True,
        leader_election_namespace="default",
        lease=LeaseTimings(3.0, 2.0, 0.2),
    )


def job_count(server: ApiServer, registry: KindRegistry) -> int:
    store = server.store
    return sum(
        len(store.list(store.resource(k.plural, "kubeflow.org"), None).items)
        for k in registry.kinds
    )


@pytest.mark.slow
def test_every_request_of_a_running_operator_is_granted(
    cluster: ApiServer, registry: KindRegistry
) -> None:
    store = cluster.store
    for kind, builder in JOBS.items():
        job = builder.run_policy(ttlSecondsAfterFinished=0, cleanPodPolicy="All").build()
        store.create(store.resource(registry.get(kind).plural, "kubeflow.org"), "default", job)
    with running_operator(cluster, registry, operator_options()):
        deadline = time.monotonic() + 60
        while job_count(cluster, registry) and time.monotonic() < deadline:
            time.sleep(0.1)  # finished, cleaned up, then deleted by TTL
        assert job_count(cluster, registry) == 0, "the operator did not finish every job"
    groups = {plural: group for group, plural in declared_resources(registry)}
    groups["podgroups"] = "scheduling.x-k8s.io"  # only scheduler-plugins' CRD is installed
    used = {(groups[resource], resource, verb) for verb, resource in cluster.stats.requests}
    missing = used - granted()
    assert not missing, f"the operator sent requests its ClusterRole does not allow: {missing}"
    # The scenario really exercised the interesting paths (else this test proves little).
    for needed in [("", "pods", "create"), ("", "pods", "delete"), ("kubeflow.org", "tfjobs",
                   "delete"), ("coordination.k8s.io", "leases", "update"),
                   ("scheduling.x-k8s.io", "podgroups", "create")]:  # fmt: skip
        assert needed in used, needed
