"""The admission reviews themselves (pure) and the webhook server's bounds: the same answers as
`trainop validate`, a defaulting patch that turns what was sent into the defaulted job, and a
bad request answered 4xx without reaching the reviews."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from builders import make_job

from trainop_core.api.admission import admission_warnings
from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.webhook.certs import new_ca, new_serving
from trainop_core.operator.webhook.review import mutate, validate
from trainop_core.operator.webhook.server import MAX_BODY_BYTES, WebhookServer, webhook_paths

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["pytorch/ddp.yaml", "tensorflow/mwms.yaml", "xgboost/dist.yaml", "mxnet/ps.yaml"]


def review(job: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": job.get("kind", "")},
        "operation": operation,
        "namespace": "team",
        "object": job,
    }
    if old is not None:
        request["oldObject"] = old
    return request


def test_validation_gives_every_problem_prepare_gives(registry: KindRegistry) -> None:
    job = make_job("PyTorchJob", "9x").master(2).replica("Chief", 1).build()
    with pytest.raises(InvalidJobError) as caught:
        prepare(job, registry=registry)
    answer = validate(review(job), registry)["response"]
    assert answer["uid"] == "u-1" and answer["allowed"] is False
    status = answer["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    assert causes == [(p.path, p.message) for p in caught.value.problems]


def test_warnings_are_upstreams_admission_warnings(registry: KindRegistry) -> None:
    job = make_job("PyTorchJob", "w").master().workers(1).build()
    job["spec"]["elasticPolicy"] = {"nProcPerNode": 2}
    kind, model = prepare(job, registry=registry)
    answer = validate(review(job), registry)["response"]
    assert answer["allowed"] is True
    assert answer["warnings"] == [str(w) for w in admission_warnings(model, kind)] != []


@pytest.mark.parametrize("kind", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "JAXJob"])
def test_managed_by_is_immutable_for_every_kind(registry: KindRegistry, kind: str) -> None:
    from builders import minimal_job

    if kind == "JAXJob":
        old = make_job(kind, "m", replica_field="jaxReplicaSpecs", container="jax").workers(1)
        old = old.build()
    else:
        old = minimal_job(kind, "m").build()
    new = json.loads(json.dumps(old))
    new["spec"].setdefault("runPolicy", {})["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert validate(review(new), registry)["response"]["allowed"] is True  # on create: allowed
    answer = validate(review(new, "UPDATE", old), registry)["response"]
    assert answer["allowed"] is False
    assert "spec.runPolicy.managedBy: field is immutable" in answer["status"]["message"]
    same = validate(review(new, "UPDATE", new), registry)["response"]
    assert same["allowed"] is True


def test_a_job_being_deleted_and_other_operations_pass(registry: KindRegistry) -> None:
    bad = make_job("PyTorchJob", "9x").build()
    bad["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert validate(review(bad, "UPDATE", bad), registry)["response"]["allowed"] is True
    assert validate(review(bad, "DELETE"), registry)["response"]["allowed"] is True


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e} is defaulted by the patch")
def test_the_defaulting_patch_makes_the_stored_spec_the_defaulted_one(
    registry: KindRegistry, example: str
) -> None:
    job = yaml.safe_load((ROOT / "examples" / example).read_text())
    job["spec"][next(k for k in job["spec"] if k.endswith("ReplicaSpecs"))] = {
        rtype.lower(): spec  # spelt as a user might: normalised by the defaults
        for rtype, spec in job["spec"][next(k for k in job["spec"] if k.endswith("Specs"))].items()
    }
    answer = mutate(review(job), registry)["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(job, json.loads(base64.b64decode(answer["patch"])))
    _, defaulted = prepare(job, registry=registry)
    assert patched["spec"] == defaulted.to_dict()["spec"]
    assert patched["metadata"] == job["metadata"]  # only the spec is touched
    again = mutate(review(patched), registry)["response"]
    assert "patch" not in again  # defaulting is idempotent


def test_a_job_that_cannot_be_read_is_left_to_the_validating_webhook(
    registry: KindRegistry,
) -> None:
    job = make_job("PyTorchJob", "x").master().build()
    job["spec"]["colour"] = "blue"
    assert mutate(review(job), registry)["response"] == {"uid": "u-1", "allowed": True}
    assert validate(review(job), registry)["response"]["allowed"] is False


# --- the server's bounds ------------------------------------------------------------------------
@pytest.fixture
def server(registry: KindRegistry, tmp_path: Path) -> Iterator[tuple[WebhookServer, str]]:
    ca = new_ca(_days(1))
    serving = new_serving(ca, ["127.0.0.1"], _days(1))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    webhooks = WebhookServer("127.0.0.1", 0, registry)
    webhooks.use_certificate(serving.cert_pem, serving.key_pem)
    webhooks.start()
    yield webhooks, str(tmp_path / "ca.crt")
    webhooks.stop()


def post(server: Any, path: str, body: bytes) -> tuple[int, bytes]:
    webhooks, ca = server
    request = urllib.request.Request(f"https://127.0.0.1:{webhooks.port}{path}", body,
                                     {"Content-Type": "application/json"})  # fmt: skip
    context = ssl.create_default_context(cafile=ca)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_server_answers_a_review_at_each_kinds_path(
    server: Any, registry: KindRegistry
) -> None:
    job = make_job("PyTorchJob", "ok").master().build()
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": review(job)}).encode()  # fmt: skip
    validating, mutating = webhook_paths(registry.get("PyTorchJob"))
    for path in (validating, mutating):
        code, answer = post(server, path, body)
        assert code == 200 and json.loads(answer)["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", 400),
        (b"[" * 100_000 + b"]" * 100_000, 400),
        (json.dumps({"kind": "Pod"}).encode(), 400),
    ],
    ids=["garbage", "nested past any limit", "not an AdmissionReview"],
)
def test_bad_requests_get_a_4xx_and_the_server_goes_on(server: Any, body: bytes, code: int) -> None:
    assert post(server, "/validate-kubeflow-org-v1-pytorchjob", body)[0] == code
    assert post(server, "/nowhere", b"{}")[0] == 404
    assert post(server, "/validate-kubeflow-org-v1-pytorchjob", b"{}")[0] == 400


def test_a_body_over_the_limit_is_refused_before_it_is_read(server: Any) -> None:
    import http.client

    webhooks, ca = server
    context = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", webhooks.port, context=context, timeout=10)
    conn.putrequest("POST", "/validate-kubeflow-org-v1-pytorchjob")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()  # and never the body: the answer must not wait for it
    assert conn.getresponse().status == 413
    conn.close()


def _days(n: int) -> Any:
    from datetime import timedelta

    return timedelta(days=n)
