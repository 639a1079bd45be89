"""The operator's roles grant what the operator uses, and nothing else.

Two derivations, both from the operator itself: the resources its code declares (the REST
resources in `trainop_core.operator.kube` and the webhook certificates' in
`trainop_core.operator.webhook.rotator`, plus one per enabled kind), and every request it really
sends while running jobs of every kind to completion and TTL deletion, with leader election,
gang scheduling and the admission webhooks (self-managed certificates) on. That run is against
the real kube-apiserver, with the manifests of `operator/` applied to it (`kubectl apply
--server-side`) and the operator authenticated as their ServiceAccount, not as admin: a verb the
roles lack is a 403 from the server, and a test fails.
"""

from __future__ import annotations

import copy
import http.client
import subprocess
from pathlib import Path

import pytest
import yaml
from builders import make_job
from decorator_servers import free_port
from deploy_manifests import Manifest, kustomize
from k8s import K8s, scrape

from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.operator import kube, metrics_auth
from trainop_core.operator.webhook import rotator
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.runtimes import operator as trainjobs
from trainop_core.runtimes.crds import trainer_crds
from trainop_core.testing.builders import wait_for
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Rule

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
TRAINER_RUNTIMES = Path(__file__).resolve().parents[2] / "operator" / "trainer" / "runtimes"
PLUGINS_SCHEDULER = "scheduler-plugins-scheduler"


def roles() -> list[Manifest]:
    return [m for m in kustomize("base") if m["kind"] in ("ClusterRole", "Role")]


def granted() -> set[Grant]:
    return {
        (group, resource, verb)
        for role in roles()
        for rule in role["rules"]
        for group in rule.get("apiGroups", ())  # none in a nonResourceURLs rule
        for resource in rule.get("resources", ())
        for verb in rule["verbs"]
    }


def declared_resources(registry: KindRegistry) -> set[tuple[str, str]]:
    """(group, plural) of every REST resource the operator's code can address."""
    modules = (
        *vars(kube).values(),
        *vars(rotator).values(),
        *vars(trainjobs).values(),
        *vars(metrics_auth).values(),
    )
    resources = {(r.group, r.plural) for r in modules if isinstance(r, kube.Resource)}
    resources.add((trainjobs.TRAINJOBS.group, f"{trainjobs.TRAINJOBS.plural}/status"))
    jobs = {("kubeflow.org", k.plural) for k in registry.kinds}
    statuses = {("kubeflow.org", f"{k.plural}/status") for k in registry.kinds}
    return resources | jobs | statuses


def test_the_role_names_exactly_the_resources_the_operator_code_declares() -> None:
    registry = build_registry(entry_points=False)
    in_role = {(group, resource) for group, resource, _ in granted()}
    assert in_role == declared_resources(registry)


def test_the_roles_have_no_wildcards_and_name_the_secret_and_webhooks_they_may_touch() -> None:
    for group, resource, verb in granted():
        assert "*" not in (group, resource, verb)
        assert resource not in ("clusterroles", "clusterrolebindings")
    # What MPIJob launchers need, and what their Roles may grant (no more than that).
    assert {("", "pods/exec", "create"), ("", "pods", "get")} <= granted()
    assert ("rbac.authorization.k8s.io", "roles", "delete") not in granted()
    defaults = WebhookOptions()
    by_name = {
        "secrets": ("Role", [defaults.secret_name]),
        "validatingwebhookconfigurations": ("ClusterRole", [defaults.validating_configuration]),
        "mutatingwebhookconfigurations": ("ClusterRole", [defaults.mutating_configuration]),
    }
    for role in roles():
        for rule in role["rules"]:
            for resource in set(rule.get("resources", ())) & set(by_name):
                kind, names = by_name[resource]
                assert (role["kind"], rule.get("resourceNames")) == (kind, names), resource
                assert set(rule["verbs"]) == {"get", "update"}


# --- the manifests on a real server ---------------------------------------------------------------
JOBS = {
    "TFJob": make_job("TFJob", "tf").chief().workers(1),
    "PyTorchJob": make_job("PyTorchJob", "pt").master().workers(1),
    "MXJob": make_job("MXJob", "mx").scheduler().servers().workers(),
    "XGBoostJob": make_job("XGBoostJob", "xgb").master().workers(1),
    "JAXJob": make_job("JAXJob", "j", replica_field="jaxReplicaSpecs", container="jax").workers(2),
    "PaddleJob": make_job("PaddleJob", "pd").workers(2),
    "MPIJob": make_job("MPIJob", "mpi").replica("Launcher").workers(2),
}
SERVICE_ACCOUNT = "training-operator"


WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def manifests_for(overlay: str, namespace: str, webhook_port: int = 0) -> list[Manifest]:
    """`overlay`'s manifests moved from `kubeflow` into `namespace`; cluster-scoped RBAC objects
    and webhook configurations renamed after it, so every test has its own (the CRDs are the
    session's, unchanged). The webhooks admit only jobs of `namespace`, calling the operator on
    127.0.0.1:`webhook_port` (no port: failurePolicy Ignore, no operator serves them)."""
    moved = []
    for manifest in copy.deepcopy(kustomize(overlay)):
        meta = manifest["metadata"]
        if manifest["kind"] == "Namespace":
            meta["name"] = namespace
        elif meta.get("namespace") == "kubeflow":
            meta["namespace"] = namespace
        if manifest["kind"] in ("ClusterRole", "ClusterRoleBinding", *WEBHOOK_KINDS):
            meta["name"] = f"{namespace}-{meta['name']}"
        if manifest["kind"] in WEBHOOK_KINDS:
            _webhooks_for(manifest, namespace, webhook_port)
        if manifest["kind"] == "ClusterRole":
            for rule in manifest["rules"]:
                if "resourceNames" in rule:
                    rule["resourceNames"] = [f"{namespace}-{n}" for n in rule["resourceNames"]]
        if manifest["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            for subject in manifest["subjects"]:
                subject["namespace"] = namespace
            if manifest["roleRef"]["kind"] == "ClusterRole":
                manifest["roleRef"]["name"] = f"{namespace}-{manifest['roleRef']['name']}"
        moved.append(manifest)
    return moved


def _webhooks_for(config: Manifest, namespace: str, port: int) -> None:
    # A cluster-scoped resource's webhook (ClusterTrainingRuntime) is left out: no
    # namespaceSelector limits it to this test.
    config["webhooks"] = [
        h for h in config["webhooks"] if any(r.get("scope") != "Cluster" for r in h["rules"])
    ]
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        if port:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
        else:
            hook["failurePolicy"] = "Ignore"


def operator_webhooks(namespace: str, port: int) -> WebhookOptions:
    """The operator's webhook options for `manifests_for(..., namespace, port)`."""
    defaults = WebhookOptions()
    return WebhookOptions(
        port=port,
        host="127.0.0.1",
        namespace=namespace,
        host_names=("127.0.0.1",),
        validating_configuration=f"{namespace}-{defaults.validating_configuration}",
        mutating_configuration=f"{namespace}-{defaults.mutating_configuration}",
    )


def kubectl(k8s: K8s, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(k8s.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def apply(k8s: K8s, manifests: list[Manifest]) -> str:
    """`kubectl apply --server-side` as the README says to install the operator."""
    return kubectl(k8s, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(manifests))


def operator_token(k8s: K8s) -> str:
    """A token of the ServiceAccount the manifests created (TokenRequest API)."""
    path = f"/api/v1/namespaces/{k8s.namespace}/serviceaccounts/{SERVICE_ACCOUNT}/token"
    answer = k8s.rest.create(path, {"spec": {"expirationSeconds": 3600}})
    return str(answer["status"]["token"])


def job_count(k8s: K8s, registry: KindRegistry) -> int:
    return sum(len(k8s.rest.get(k8s.job_path(k.plural))["items"]) for k in registry.kinds)


def used_grants(proxy: FaultProxy, registry: KindRegistry) -> set[Grant]:
    groups = {plural: group for group, plural in declared_resources(registry)}
    groups["podgroups"] = "scheduling.x-k8s.io"  # scheduler-plugins' (gang_scheduler_name)
    return {(groups[resource], resource, verb) for verb, resource in proxy.stats.requests}


@pytest.mark.parametrize("overlay", ["overlays/standalone", "overlays/namespaced"])
def test_the_manifests_apply_to_a_real_server_and_grant_their_service_account(
    k8s: K8s, overlay: str
) -> None:
    out = apply(k8s, manifests_for(overlay, k8s.namespace))
    assert "deployment.apps/training-operator serverside-applied" in out
    assert f"serviceaccount/{SERVICE_ACCOUNT} serverside-applied" in out
    who = f"system:serviceaccount:{k8s.namespace}:{SERVICE_ACCOUNT}"

    def can(verb: str, resource: str, namespace: str, *more: str) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(k8s.kubeconfig), "auth", "can-i", verb, resource,
             "-n", namespace, "--as", who, *more],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return done.stdout.strip()

    assert can("create", "pods", k8s.namespace) == "yes"
    assert can("update", "pytorchjobs", k8s.namespace, "--subresource=status") == "yes"
    assert can("update", "pytorchjobs", k8s.namespace) == "no"  # the spec is the user's
    assert can("update", "secrets/training-operator-webhook-cert", k8s.namespace) == "yes"
    assert can("get", "secrets/someone-elses", k8s.namespace) == "no"
    assert can("list", "secrets", k8s.namespace) == "no"
    validator = f"{k8s.namespace}-validator.training-operator.kubeflow.org"
    assert can("update", f"validatingwebhookconfigurations/{validator}", "default") == "yes"
    assert can("update", "validatingwebhookconfigurations/another", "default") == "no"
    elsewhere = "yes" if overlay.endswith("standalone") else "no"  # a Role stays in its namespace
    assert can("create", "pods", "kube-system") == elsewhere


def test_every_request_of_a_running_operator_is_granted(
    k8s: K8s, k8s_proxy: FaultProxy, registry: KindRegistry
) -> None:
    """Every kind to completion and TTL deletion, leader election, gang scheduling and the
    admission webhooks on, as the manifests' ServiceAccount: the server refuses nothing, and
    nothing outside the roles is sent."""
    port = free_port()
    apply(k8s, manifests_for("overlays/standalone", k8s.namespace, port))
    # MPI's workers run until the job is over: the launcher starts once both run.
    k8s.kubelet.rules[:] = [Rule(pattern="mpi-worker-*", run_seconds=None), Rule(run_seconds=0.2)]
    options = {"gang_scheduler_name": PLUGINS_SCHEDULER, "leader_elect": True,
               "webhook": operator_webhooks(k8s.namespace, port)}  # fmt: skip
    with k8s.operator(token=operator_token(k8s), proxy=k8s_proxy, **options) as manager:
        wait_for(manager.webhooks.ready, timeout=60, interval=0.1)
        for kind, builder in JOBS.items():  # admitted (and defaulted) by the operator's webhooks
            job = builder.run_policy(ttlSecondsAfterFinished=0, cleanPodPolicy="All").build()
            k8s.rest.create(k8s.job_path(registry.get(kind).plural), job)
        # Every job finished, cleaned up, then deleted by its TTL.
        wait_for(lambda: job_count(k8s, registry) == 0, timeout=120, interval=0.2)
    refused = {key: n for key, n in k8s_proxy.stats.answers.items() if key[2] == 403}
    assert not refused, f"the server refused the operator's requests: {refused}"
    used = used_grants(k8s_proxy, registry)
    missing = used - granted()
    assert not missing, f"the operator sent requests its ClusterRole does not allow: {missing}"
    # The scenario really exercised the interesting paths (else this test proves little).
    for needed in [("", "pods", "create"), ("", "pods", "delete"), ("kubeflow.org", "tfjobs",
                   "delete"), ("coordination.k8s.io", "leases", "update"),
                   ("scheduling.x-k8s.io", "podgroups", "create"), ("", "secrets", "update"),
                   ("admissionregistration.k8s.io", "validatingwebhookconfigurations",
                    "update"), ("", "configmaps", "create"),
                   ("rbac.authorization.k8s.io", "roles", "create")]:  # fmt: skip
        assert needed in used, needed


def test_a_verb_missing_from_the_role_is_refused_by_the_server(
    k8s: K8s, k8s_proxy: FaultProxy
) -> None:
    """The check above is real: without `create` on pods, the job gets no pods, and the server
    says why."""
    manifests = manifests_for("overlays/standalone", k8s.namespace)
    role = next(m for m in manifests if m["kind"] == "ClusterRole")
    for rule in role["rules"]:
        if "pods" in rule["resources"]:
            rule["verbs"].remove("create")
    apply(k8s, manifests)
    k8s.rest.create(k8s.job_path("pytorchjobs"), copy.deepcopy(JOBS["PyTorchJob"]).build())
    with k8s.operator(token=operator_token(k8s), proxy=k8s_proxy):
        wait_for(lambda: k8s_proxy.stats.answers[("create", "pods", 403)], timeout=60)
    assert not k8s.rest.get(f"/api/v1/namespaces/{k8s.namespace}/pods")["items"]


def test_every_request_of_an_operator_running_trainjobs_is_granted(
    k8s: K8s, k8s_proxy: FaultProxy, registry: KindRegistry
) -> None:
    """`--enable-scheme TrainJob` as the manifests' ServiceAccount: Trainer v2's CRDs and the
    default runtimes applied as the docs say (`kubectl apply --server-side`), a TrainJob run to
    Complete, and one on mpi-distributed (its launcher's ConfigMap, ServiceAccount and Role
    granting pods/exec); the server refuses nothing and nothing outside the roles is sent."""
    apply(k8s, manifests_for("overlays/standalone", k8s.namespace))
    k8s.control_plane.install_crds(trainer_crds())
    kubectl(k8s, "apply", "--server-side", "-f", str(TRAINER_RUNTIMES))
    k8s.kubelet.rules[:] = [Rule(run_seconds=0.2)]
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{k8s.namespace}/trainjobs"
    runtimes = {"tj": "torch-distributed", "mtj": "mpi-distributed"}
    with k8s.operator(token=operator_token(k8s), proxy=k8s_proxy, enable_schemes=("TrainJob",)):
        for name, runtime in runtimes.items():
            body = {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": 2}},
            }
            k8s.rest.create(path, body)

        def complete() -> bool:
            statuses = [k8s.rest.get(f"{path}/{name}").get("status") or {} for name in runtimes]
            return all(
                any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)
                for conditions in (s.get("conditions") or [] for s in statuses)
            )

        wait_for(complete, timeout=60, interval=0.2)
    refused = {key: n for key, n in k8s_proxy.stats.answers.items() if key[2] == 403}
    assert not refused, f"the server refused the operator's requests: {refused}"
    used = used_grants(k8s_proxy, registry)
    assert not used - granted(), f"requests its ClusterRole does not allow: {used - granted()}"
    for needed in [("trainer.kubeflow.org", "clustertrainingruntimes", "list"),
                   ("trainer.kubeflow.org", "trainjobs/status", "update"),
                   ("", "pods", "create"), ("", "configmaps", "create"),
                   ("rbac.authorization.k8s.io", "roles", "create")]:  # fmt: skip
        assert needed in used, needed


# --- /metrics: HTTPS, and only for whom the API server authorizes ---------------------------
def test_metrics_are_served_over_https_only_to_whom_the_api_server_authorizes(k8s: K8s) -> None:
    """The operator as the manifests' ServiceAccount, with its defaults (HTTPS, a self-signed
    certificate): Prometheus's ServiceAccount bound to the manifests' metrics-reader role reads
    /metrics; another ServiceAccount is refused (403), no token or a made-up one is 401, and
    plain HTTP gets no answer at all."""
    apply(k8s, manifests_for("overlays/standalone", k8s.namespace))
    reader_role = f"{k8s.namespace}-training-operator-metrics-reader"
    cp = k8s.control_plane
    reader = cp.service_account_token(k8s.namespace, "prometheus", cluster_roles=[reader_role])
    other = cp.service_account_token(k8s.namespace, "someone-else")
    options = {"metrics_bind_address": "127.0.0.1:0", "metrics_secure": True}
    with k8s.operator(token=operator_token(k8s), **options) as manager:
        port, ca = manager.metrics_endpoint.port, manager.metrics_endpoint.tls.cert_pem
        status, body = wait_for(lambda: _scrape_or_none(port, ca, reader), timeout=30)
        assert status == 200, body
        assert "controller_runtime_reconcile_total" in body or "workqueue_depth" in body
        assert scrape(port, ca, other) == (
            403,
            f"Authorization denied for user system:serviceaccount:{k8s.namespace}:someone-else\n",
        )
        assert scrape(port, ca, None) == (401, "Unauthorized\n")
        assert scrape(port, ca, "not-a-token") == (401, "Unauthorized\n")
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            plain.request("GET", "/metrics", headers={"Authorization": f"Bearer {reader}"})
            plain.getresponse()
        plain.close()


def _scrape_or_none(port: int, ca: bytes, token: str) -> tuple[int, str] | None:
    try:
        return scrape(port, ca, token)
    except OSError:  # not listening yet
        return None
