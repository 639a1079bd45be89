"""`kubectl kustomize` of operator/base and both overlays: valid Kubernetes objects, as intended."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from deploy_manifests import Manifest, find, kustomize

from trainop_core.kinds.table import build_registry

# The oldest Kubernetes release still supported upstream when v1.9 shipped, and the newest schema.
VERSIONS = ("1.27", kubernetes_validate.latest_version())
NAMESPACED_KINDS = ("ServiceAccount", "Deployment", "Service", "Role", "RoleBinding")


def container(manifests: tuple[Manifest, ...]) -> dict[str, Any]:
    deployment = find(manifests, "Deployment", "training-operator")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_strictly_against_the_kubernetes_schemas(
    built: tuple[str, tuple[Manifest, ...]], version: str
) -> None:
    path, manifests = built
    for manifest in manifests:
        if manifest["apiVersion"].startswith("cert-manager.io/"):
            continue  # not a Kubernetes schema: tests/deploy/test_webhooks.py checks them
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            pytest.fail(f"{path}: {manifest['kind']} {manifest['metadata']['name']}: {where}: "
                        f"{err.message}")  # fmt: skip


def test_strict_validation_rejects_an_unknown_field() -> None:
    """The check above is real: a misspelt Deployment field fails it."""
    deployment = copy.deepcopy(find(kustomize("base"), "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_the_base_holds_one_crd_per_kind_and_the_operator_objects() -> None:
    manifests = kustomize("base")
    crds = sorted(
        m["metadata"]["name"] for m in manifests if m["kind"] == "CustomResourceDefinition"
    )
    plurals = sorted(f"{k.plural}.kubeflow.org" for k in build_registry(entry_points=False).kinds)
    assert crds == plurals
    others = sorted((m["kind"], m["metadata"]["name"]) for m in manifests
                    if m["kind"] != "CustomResourceDefinition")  # fmt: skip
    operator = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service")
    assert others == sorted(
        [(kind, "training-operator") for kind in operator]
        + [("ClusterRole", "training-operator-webhook"),
           ("ClusterRoleBinding", "training-operator-webhook"),
           ("ClusterRole", "training-operator-metrics-auth"),
           ("ClusterRoleBinding", "training-operator-metrics-auth"),
           ("ClusterRole", "training-operator-metrics-reader"),
           ("Role", "training-operator-webhook-cert"),
           ("RoleBinding", "training-operator-webhook-cert"),
           ("Secret", "training-operator-webhook-cert"),
           ("ValidatingWebhookConfiguration", "validator.training-operator.kubeflow.org"),
           ("MutatingWebhookConfiguration", "defaulter.training-operator.kubeflow.org")]
    )  # fmt: skip


def test_the_deployment_runs_one_leader_elected_replica_with_probes_and_limits() -> None:
    manifests = kustomize("base")
    deployment = find(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "training-operator"
    main = container(manifests)
    assert "--leader-elect" in main["args"]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"metrics": 8443, "probes": 8081, "webhook-server": 9443}
    # Metrics over HTTPS behind the API server; probes on the pod's IP, which the kubelet probes.
    assert "--metrics-secure=true" in main["args"]
    assert "--health-probe-bind-address=$(POD_IP):8081" in main["args"]
    env = {e["name"]: e for e in main["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    for bound in ("requests", "limits"):
        assert set(main["resources"][bound]) == {"cpu", "memory"}


def test_the_operator_runs_as_uid_65532_unprivileged_read_only() -> None:
    manifests = kustomize("base")
    pod = find(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    security = container(manifests)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_the_service_targets_metrics_and_webhooks_and_asks_prometheus_to_scrape() -> None:
    manifests = kustomize("base")
    service = find(manifests, "Service")
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8443"
    assert annotations["prometheus.io/scheme"] == "https"
    ports = [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [(8443, "metrics"), (443, "webhook-server")]
    pod_labels = find(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_the_standalone_overlay_puts_everything_in_kubeflow() -> None:
    manifests = kustomize("overlays/standalone")
    assert find(manifests, "Namespace", "kubeflow")
    for manifest in manifests:
        if manifest["kind"] in NAMESPACED_KINDS:
            assert manifest["metadata"]["namespace"] == "kubeflow", manifest["kind"]
    for name in (
        "training-operator",
        "training-operator-webhook",
        "training-operator-metrics-auth",
    ):
        binding = find(manifests, "ClusterRoleBinding", name)
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}
        ]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in find(manifests, kind)["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "kubeflow"


def test_the_namespaced_overlay_grants_a_role_in_its_namespace_and_watches_only_it() -> None:
    manifests = kustomize("overlays/namespaced")
    # The cluster-wide grants left: its own two webhook configurations, by name, and asking the
    # API server about a scrape of /metrics (reviews are cluster-scoped); the reader role is
    # for Prometheus, bound by whoever installs it.
    cluster_roles = {r["metadata"]["name"]: r for r in manifests if r["kind"] == "ClusterRole"}
    assert sorted(cluster_roles) == [
        "training-operator-metrics-auth",
        "training-operator-metrics-reader",
        "training-operator-webhook",
    ]
    assert all(
        rule.get("resourceNames") for rule in cluster_roles["training-operator-webhook"]["rules"]
    )
    assert [
        (r["resources"], r["verbs"])
        for r in cluster_roles["training-operator-metrics-auth"]["rules"]
    ] == [
        (["tokenreviews"], ["create"]),
        (["subjectaccessreviews"], ["create"]),
    ]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in find(manifests, kind)["webhooks"]:
            if hook["rules"][0]["scope"] == "Cluster":  # ClusterTrainingRuntime: no namespace
                assert "namespaceSelector" not in hook
                continue
            only = {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}}
            assert hook["namespaceSelector"] == only
    role = find(manifests, "Role", "training-operator")
    binding = find(manifests, "RoleBinding", "training-operator")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kubeflow"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "training-operator",
    }
    assert role["rules"] == find(kustomize("base"), "ClusterRole", "training-operator")["rules"]
    main = container(manifests)
    assert "--namespace=$(POD_NAMESPACE)" in main["args"]
    env = {e["name"]: e for e in main["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # CRDs cannot be namespaced: installing still needs cluster-admin (see the kustomization).
    assert any(m["kind"] == "CustomResourceDefinition" for m in manifests)
