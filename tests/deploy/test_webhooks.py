"""operator/'s webhook configurations match the operator's code: one webhook per kind at the
server's paths (and a validating one for each of Trainer v2's TrainJob and runtimes), behind the
Service's port 443 and the container's webhook port, with the Secret
and configuration names the operator's flags default to; and the cert-manager overlay serves
what cert-manager writes."""

from __future__ import annotations

import pytest
from deploy_manifests import find, kustomize

from trainop_core.kinds.table import build_registry
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.operator.webhook.server import V2_KINDS, v2_webhook_path, webhook_paths

CONFIGURATIONS = {
    "ValidatingWebhookConfiguration": ("validator", 0),
    "MutatingWebhookConfiguration": ("defaulter", 1),
}


@pytest.mark.parametrize("kind", list(CONFIGURATIONS))
def test_one_webhook_per_kind_at_the_servers_path(kind: str) -> None:
    prefix, which = CONFIGURATIONS[kind]
    defaults = WebhookOptions()
    config = find(kustomize("overlays/standalone"), kind)
    name = defaults.validating_configuration if which == 0 else defaults.mutating_configuration
    assert config["metadata"]["name"] == name
    hooks = {h["name"]: h for h in config["webhooks"]}
    registry = build_registry(entry_points=False)
    v2_hooks = {f"{prefix}.{k.lower()}.training-operator.kubeflow.org": (k, plural)
                for k, plural in V2_KINDS} if which == 0 else {}  # fmt: skip
    assert set(hooks) == {f"{prefix}.{k.kind.lower()}.training-operator.kubeflow.org"
                          for k in registry.kinds} | set(v2_hooks)  # fmt: skip
    for job_kind in registry.kinds:
        hook = hooks[f"{prefix}.{job_kind.kind.lower()}.training-operator.kubeflow.org"]
        service = hook["clientConfig"]["service"]
        assert service == {"name": defaults.service_name, "namespace": "kubeflow", "port": 443,
                           "path": webhook_paths(job_kind)[which]}  # fmt: skip
        (rule,) = hook["rules"]
        assert rule["resources"] == [job_kind.plural]  # never the status subresource
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")
    for name, (v2_kind, plural) in v2_hooks.items():
        hook = hooks[name]
        assert hook["clientConfig"]["service"]["path"] == v2_webhook_path(v2_kind)
        (rule,) = hook["rules"]
        scope = "Cluster" if v2_kind.startswith("Cluster") else "Namespaced"
        assert rule == {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"], "resources": [plural],
                        "scope": scope}  # fmt: skip
        assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")


def test_the_service_reaches_the_containers_webhook_port_and_the_secret_is_the_flags() -> None:
    manifests = kustomize("overlays/standalone")
    (port,) = [p for p in find(manifests, "Service")["spec"]["ports"] if p["port"] == 443]
    container = find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == WebhookOptions().port == 9443
    secret = find(manifests, "Secret")
    assert secret["metadata"] == {
        "name": WebhookOptions().secret_name,
        "namespace": "kubeflow",
        "labels": secret["metadata"]["labels"],
    }
    assert "data" not in secret  # the operator fills it


def test_the_cert_manager_overlay_mounts_the_certificate_the_operator_serves() -> None:
    manifests = kustomize("overlays/cert-manager")
    assert not [m for m in manifests if m["kind"] == "Secret"]  # cert-manager writes it
    certificate = find(manifests, "Certificate")
    hosts = WebhookOptions(namespace="kubeflow").serving_hosts()
    assert certificate["spec"]["dnsNames"] == list(hosts)
    assert certificate["spec"]["issuerRef"]["name"] == find(manifests, "Issuer")["metadata"]["name"]
    secret_name = certificate["spec"]["secretName"]
    pod = find(manifests, "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret")]
    assert volume["secret"]["secretName"] == secret_name
    container = pod["containers"][0]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert f"--webhook-cert-dir={mount['mountPath']}" in (container["args"])
    for kind in CONFIGURATIONS:
        annotations = find(manifests, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"kubeflow/{secret_name}"
    rbac = {(m["kind"], m["metadata"]["name"]) for m in manifests if "Role" in m["kind"]}
    # No Role on Secrets (cert-manager writes the certificate); the metrics reviews and reader stay.
    assert rbac == {("ClusterRole", "training-operator"),
                    ("ClusterRoleBinding", "training-operator"),
                    ("ClusterRole", "training-operator-metrics-auth"),
                    ("ClusterRoleBinding", "training-operator-metrics-auth"),
                    ("ClusterRole", "training-operator-metrics-reader")}  # fmt: skip


@pytest.mark.parametrize("kind", list(CONFIGURATIONS))
def test_the_namespaced_overlay_admits_only_its_own_namespace_for_every_kind(kind: str) -> None:
    config = find(kustomize("overlays/namespaced"), kind)
    # A cluster-scoped resource (ClusterTrainingRuntime) has no namespace to select.
    selectors = [hook.get("namespaceSelector") for hook in config["webhooks"]
                 if hook["rules"][0]["scope"] != "Cluster"]  # fmt: skip
    expected = {"matchLabels": {"kubernetes.io/metadata.name": "kubeflow"}}
    trainer = 2 if kind.startswith("Validating") else 0  # TrainJob, TrainingRuntime
    assert len(selectors) == len(build_registry(entry_points=False).kinds) + trainer
    assert all(selector == expected for selector in selectors), selectors
