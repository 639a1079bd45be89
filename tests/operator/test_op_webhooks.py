"""`trainop operator`'s admission webhooks on the real kube-apiserver, which calls them on a
loopback URL with the caBundle the operator wrote itself: `kubectl apply` of an invalid job is
refused with every problem and its field path, a valid job is stored defaulted, managedBy cannot
change, and failurePolicy decides when the webhook is down."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import make_job
from decorator_servers import free_port
from opkit import Cluster, RunningOperator, wait_for
from webhooks import Names, configuration, patch_webhooks, registered

from trainop_core.kinds.table import build_registry
from trainop_core.operator.webhook.options import WebhookOptions
from trainop_core.testing.rest import RestError

Start = Callable[..., RunningOperator]
VALIDATING = "ValidatingWebhookConfiguration"
KINDS = [kind.kind for kind in build_registry(entry_points=False)]


def webhook_options(cluster: Cluster, names: Names, port: int, **fields: Any) -> WebhookOptions:
    return WebhookOptions(
        port=port,
        host="127.0.0.1",
        namespace=cluster.namespace,
        host_names=("127.0.0.1",),
        validating_configuration=names.validating,
        mutating_configuration=names.mutating,
        **fields,
    )


@pytest.fixture
def with_webhooks(cluster: Cluster, run_operator: Start) -> Iterator[tuple[RunningOperator, Names]]:
    """An operator serving the webhooks, registered (failurePolicy Fail) for this namespace."""
    port = free_port()
    with registered(cluster.control_plane, cluster.namespace, port) as names:
        op = run_operator(webhook=webhook_options(cluster, names, port)).wait_started()
        wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
        yield op, names


def kubectl(cluster: Cluster, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def apply(cluster: Cluster, job: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))


def invalid_job() -> dict[str, Any]:
    job = make_job("PyTorchJob", "9.bad").master(2).replica("Chief", 1)
    return job.container("Master", image=None).build()


def test_kubectl_apply_of_an_invalid_job_is_refused_with_every_problem_and_its_field_path(
    cluster: Cluster, with_webhooks: Any
) -> None:
    done = apply(cluster, invalid_job())
    assert done.returncode != 0
    # The API server passes the webhook's 422 on, causes and all; kubectl lists them.
    assert 'The PyTorchJob "9.bad" is invalid:' in done.stderr
    assert "is not a valid DNS label" in done.stderr  # trainop's wording, not the API server's
    for path in (
        "metadata.name",
        "spec.pytorchReplicaSpecs.Chief",
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image",
        "spec.pytorchReplicaSpecs.Master.replicas",
    ):
        assert f"* {path}: " in done.stderr, (path, done.stderr)
    listed = cluster.rest.get(f"/apis/kubeflow.org/v1/namespaces/{cluster.namespace}/pytorchjobs")
    assert listed["items"] == []


def test_kubectl_apply_or_scale_above_the_replica_bound_is_refused_naming_the_count(
    cluster: Cluster, with_webhooks: Any
) -> None:
    huge = make_job("PyTorchJob", "huge").master().workers(2**31 - 1).build()
    done = apply(cluster, huge)
    assert done.returncode != 0
    assert (
        'The PyTorchJob "huge" is invalid: spec.pytorchReplicaSpecs.Worker.replicas: the job '
        "has 2147483648 replicas in all; "
        "this operator runs at most 10000 replicas of one job (--max-replicas-per-job)"
    ) in done.stderr, done.stderr
    assert (
        apply(cluster, make_job("PyTorchJob", "small").master().workers(1).build()).returncode == 0
    )
    patch = '{"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 10000}}}}'
    scaled = kubectl(cluster, "patch", "pytorchjob", "small", "--type=merge", "-p", patch)
    assert scaled.returncode != 0 and "the job has 10001 replicas in all" in scaled.stderr
    assert cluster.pods("huge") == []


def test_a_valid_job_is_stored_defaulted_and_its_warnings_are_printed(
    cluster: Cluster, with_webhooks: Any
) -> None:
    job = make_job("PyTorchJob", "ok").master().workers(2).build()
    job["spec"]["elasticPolicy"] = {"nProcPerNode": 2, "minReplicas": 1, "maxReplicas": 2}
    done = apply(cluster, job)
    assert done.returncode == 0, done.stderr
    assert "Warning: spec.elasticPolicy.nProcPerNode is deprecated" in done.stderr
    stored = json.loads(kubectl(cluster, "get", "pytorchjob", "ok", "-o", "json").stdout)
    spec = stored["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    for rtype in ("Master", "Worker"):
        replica = spec["pytorchReplicaSpecs"][rtype]
        assert replica["restartPolicy"] == "OnFailure"
        ports = replica["template"]["spec"]["containers"][0]["ports"]
        assert {"name": "pytorchjob-port", "containerPort": 23456} in [
            {k: p[k] for k in ("name", "containerPort")} for p in ports
        ]
    assert spec["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


@pytest.mark.parametrize("kind", ["PyTorchJob", "JAXJob", "TFJob"])
def test_managed_by_cannot_change_on_update(
    cluster: Cluster, with_webhooks: Any, kind: str
) -> None:
    if kind == "JAXJob":
        builder = make_job(kind, "m", replica_field="jaxReplicaSpecs", container="jax").workers(1)
    elif kind == "TFJob":
        builder = make_job(kind, "m").workers(1)
    else:
        builder = make_job(kind, "m").master().workers(1)
    assert apply(cluster, builder.build()).returncode == 0
    patch = {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}}
    done = kubectl(cluster, "patch", kind.lower(), "m", "--type=merge", "-p", json.dumps(patch))
    assert done.returncode != 0
    assert "spec.runPolicy.managedBy: field is immutable" in done.stderr


def test_with_the_webhook_down_failure_policy_decides(
    cluster: Cluster, run_operator: Start
) -> None:
    port = free_port()
    with registered(cluster.control_plane, cluster.namespace, port) as names:
        op = run_operator(webhook=webhook_options(cluster, names, port)).wait_started()
        wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
        op.stop()  # the webhook is down: Fail refuses every job
        refused = apply(cluster, make_job("PyTorchJob", "a").master().build())
        assert refused.returncode != 0 and "failed calling webhook" in refused.stderr
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            name = names.validating if kind.startswith("Validating") else names.mutating
            patch_webhooks(cluster.control_plane, kind, name, failurePolicy="Ignore")
        wait_for(
            lambda: apply(cluster, invalid_job() | {"metadata": {"name": "b"}}).returncode == 0,
            what="accepted with Ignore",
        )
        # Without the webhook, the controller still refuses it: Failed, with the problems.
        run_operator()
        cluster.wait_condition("PyTorchJob", "b", "Failed")


def test_readyz_is_false_until_the_webhooks_serve(
    cluster: Cluster, run_operator: Start, tmp_path: Path
) -> None:
    """External certificates (cert-manager's mode): no certificate, not ready; once one appears
    in the directory, the webhook serves it and the operator is ready."""
    from trainop_core.operator.webhook.certs import new_ca, new_serving

    port, certs = free_port(), tmp_path / "certs"
    certs.mkdir()
    options = WebhookOptions(port=port, host="127.0.0.1", cert_management="external",
                             cert_dir=str(certs), check_period=0.2)  # fmt: skip
    op = run_operator(webhook=options).wait_started()
    code, body = op.get("/readyz")
    assert code == 500 and "[-]webhooks failed" in body
    ca = new_ca(_days(1))
    serving = new_serving(ca, ["127.0.0.1"], _days(1))
    (certs / "tls.key").write_bytes(serving.key_pem)
    (certs / "tls.crt").write_bytes(serving.cert_pem)
    wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz after the certificate")
    served = _served_certificate(port, ca.cert_pem)
    assert served == serving.cert_pem


def _served_certificate(port: int, ca_pem: bytes) -> bytes:
    import socket
    import ssl

    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return ssl.DER_cert_to_PEM_cert(der).encode()


def _days(n: int) -> Any:
    from datetime import timedelta

    return timedelta(days=n)


def test_the_operator_writes_the_ca_bundle_of_both_configurations(
    cluster: Cluster, with_webhooks: Any
) -> None:
    _, names = with_webhooks
    secret = cluster.rest.get(
        f"/api/v1/namespaces/{cluster.namespace}/secrets/training-operator-webhook-cert"
    )
    bundle = secret["data"]["ca.crt"]
    for kind, name in (("ValidatingWebhookConfiguration", names.validating),
                       ("MutatingWebhookConfiguration", names.mutating)):  # fmt: skip
        hooks = configuration(cluster.control_plane, kind, name)["webhooks"]
        # One per kind (validating: also TrainJob's and TrainingRuntime's), each with the bundle.
        assert len(hooks) == len(KINDS) + (2 if kind == VALIDATING else 0)
        assert {h["clientConfig"]["caBundle"] for h in hooks} == {bundle}


def test_certificates_are_renewed_before_expiry_and_admission_never_stops(
    cluster: Cluster, run_operator: Start
) -> None:
    """Serving certificates of 3 s and a CA of 6 s, renewed 1.5 s before they expire: within
    about 8 s the serving certificate is renewed several times and the CA once (its bundle then
    holds both CAs); every admission request meanwhile is answered by the webhook itself."""
    from datetime import timedelta

    from trainop_core.operator.webhook.certs import Validity, split_bundle

    port = free_port()
    validity = Validity(timedelta(seconds=6), timedelta(seconds=3), timedelta(seconds=1.5))
    secret_path = f"/api/v1/namespaces/{cluster.namespace}/secrets/training-operator-webhook-cert"
    jobs = f"/apis/kubeflow.org/v1/namespaces/{cluster.namespace}/pytorchjobs"
    valid = make_job("PyTorchJob", "v").master().build()
    with registered(cluster.control_plane, cluster.namespace, port) as names:
        options = webhook_options(cluster, names, port, validity=validity, check_period=0.25)
        op = run_operator(webhook=options).wait_started()
        wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
        serving, authorities, bundles = set(), set(), set()
        while len(authorities) < 2 or len(serving) < 4 or len(bundles) < 2:
            secret = cluster.rest.get(secret_path)["data"]
            serving.add(secret["tls.crt"])
            authorities.add(split_bundle(_b64(secret["ca.crt"]))[0])
            hooks = configuration(cluster.control_plane, VALIDATING, names.validating)["webhooks"]
            bundles.add(hooks[0]["clientConfig"]["caBundle"])
            cluster.rest.create(jobs, valid, dryRun="All")  # admitted by the webhook
            try:
                cluster.rest.create(jobs, invalid_job(), dryRun="All")
            except RestError as err:
                assert "is not a valid DNS label" in str(err), err  # refused by the webhook
            else:
                raise AssertionError("an invalid job was admitted")
            assert len(serving) < 12, "renewed far more often than the validity asks"
    last = _b64(cluster.rest.get(secret_path)["data"]["ca.crt"])
    assert len(split_bundle(last)) == 2  # the new CA, and the old one until it expires
    assert len(bundles) >= 2


def _b64(text: str) -> bytes:
    import base64

    return base64.b64decode(text)


def test_configurations_applied_after_the_operator_get_their_ca_bundle_at_once(
    cluster: Cluster, run_operator: Start
) -> None:
    """kubectl applies webhook configurations after the Deployment: the operator, already
    serving, writes their caBundle within seconds, and admission works."""
    port = free_port()
    names = Names(f"{cluster.namespace}.validator.training-operator.kubeflow.org",
                  f"{cluster.namespace}.defaulter.training-operator.kubeflow.org")  # fmt: skip
    op = run_operator(webhook=webhook_options(cluster, names, port)).wait_started()
    wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
    with registered(cluster.control_plane, cluster.namespace, port):
        wait_for(
            lambda: "caBundle" in configuration(cluster.control_plane, VALIDATING,
                                                names.validating)["webhooks"][0]["clientConfig"],
            timeout=10, what="caBundle written",
        )  # fmt: skip
        done = wait_for(lambda: (d := apply(cluster, invalid_job())).returncode and d, timeout=10)
        assert "is not a valid DNS label" in done.stderr


def test_a_lost_answer_to_the_secrets_creation_is_looked_up_not_sent_again(
    cluster: Cluster, run_operator: Start
) -> None:
    """The server made the Secret, its answer was lost: the operator reads what it made (the
    create is never resent: the server may have applied it) and serves its certificate."""
    lost = cluster.proxy.lose("create", "secrets")
    port = free_port()
    with registered(cluster.control_plane, cluster.namespace, port) as names:
        op = run_operator(webhook=webhook_options(cluster, names, port))
        wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
    assert lost.applied == 1
    assert cluster.proxy.stats.requests[("create", "secrets")] == 1


def test_two_replicas_serve_the_one_certificate_of_the_secret(
    cluster: Cluster, run_operator: Start
) -> None:
    """Both replicas start at once and may both make certificates: whichever writes the Secret
    first wins, the other's write is a conflict it recovers from (upstream's #2640 restarted the
    controller on those), and both serve the winner's certificate."""
    ports = [free_port(), free_port()]
    with registered(cluster.control_plane, cluster.namespace, ports[0]) as names:
        ops = [run_operator(webhook=webhook_options(cluster, names, p)) for p in ports]
        for op in ops:
            wait_for(lambda op=op: op.get("/readyz")[0] == 200, what="/readyz")
        secret = cluster.rest.get(
            f"/api/v1/namespaces/{cluster.namespace}/secrets/training-operator-webhook-cert"
        )["data"]
        ca = _b64(secret["ca.crt"])
        wait_for(
            lambda: all(_served_certificate(p, ca) == _b64(secret["tls.crt"]) for p in ports),
            timeout=15, what="both replicas serve the Secret's certificate",
        )  # fmt: skip


def test_kubectl_apply_of_an_invalid_trainjob_is_refused_and_a_valid_one_admitted(
    cluster: Cluster, run_operator: Start
) -> None:
    """`--enable-scheme TrainJob`: the shipped TrainJob webhook refuses a TrainJob with a bad
    runtimeRef and trainer, every field named, and env its runtime's ML policy sets; a TrainJob
    whose runtime does not exist yet is admitted (the reconciler waits for it), and its
    managedBy cannot change afterwards."""
    from trainop_core.runtimes.catalog import DEFAULTS_DIR
    from trainop_core.runtimes.crds import trainer_crds

    cluster.control_plane.install_crds(trainer_crds())
    runtimes = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
    xgboost = yaml.safe_load((DEFAULTS_DIR / "xgboost-distributed.yaml").read_text())
    try:
        cluster.rest.create(runtimes, xgboost)
    except RestError as err:
        assert err.status == 409  # an earlier test applied it
    port = free_port()
    with registered(cluster.control_plane, cluster.namespace, port) as names:
        options = webhook_options(cluster, names, port)
        op = run_operator(webhook=options, enable_schemes=("TrainJob",)).wait_started()
        wait_for(lambda: op.get("/readyz")[0] == 200, what="/readyz")
        bad = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "bad"},
            "spec": {
                "runtimeRef": {"name": "torch-distributed", "kind": "Deployment"},
                "trainer": {"numNodes": 0},
            },
        }
        done = apply(cluster, bad)
        assert done.returncode != 0
        assert 'The TrainJob "bad" is invalid:' in done.stderr, done.stderr
        for path in ("spec.runtimeRef.kind", "spec.trainer.numNodes"):
            assert f"* {path}: " in done.stderr, (path, done.stderr)
        # trainop's wording: the CRD's schema alone would have stored it.
        assert "expected one of ClusterTrainingRuntime, TrainingRuntime" in done.stderr
        trainjobs = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{cluster.namespace}/trainjobs"
        assert cluster.rest.get(trainjobs)["items"] == []
        good = copy.deepcopy(bad)
        good["metadata"]["name"] = "good"
        good["spec"] = {"runtimeRef": {"name": "not-installed-yet"}, "trainer": {"numNodes": 2}}
        done = apply(cluster, good)
        assert done.returncode == 0, done.stderr
        assert cluster.rest.get(f"{trainjobs}/good")["spec"]["trainer"] == {"numNodes": 2}
        reserved = copy.deepcopy(good)
        reserved["metadata"]["name"] = "reserved"
        reserved["spec"] = {
            "runtimeRef": {"name": "xgboost-distributed"},
            "trainer": {"env": [{"name": "DMLC_NUM_WORKER", "value": "8"}]},
        }
        done = apply(cluster, reserved)
        assert done.returncode != 0
        assert "spec.trainer.env[0].name: must not have reserved envs" in done.stderr, done.stderr
        patch = {"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}
        done = kubectl(
            cluster, "patch", "trainjob", "good", "--type=merge", "-p", json.dumps(patch)
        )
        assert done.returncode != 0
        # The CRD's own rule (Trainer's) refuses it before the webhook is asked.
        assert "spec.managedBy" in done.stderr and "field is immutable" in done.stderr
