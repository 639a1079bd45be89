"""The admission reviews of Kubeflow Trainer v2's TrainJob, TrainingRuntime and
ClusterTrainingRuntime (pure): the answers of `trainop validate` (`parse_v2`) with their field
paths, managedBy immutable on a TrainJob's update, a runtime that does not exist yet no reason to
refuse; and the server serving these paths only when TrainJob is enabled."""

from __future__ import annotations

import copy
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop_core.api.trainjob_validation import parse_v2
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import KindRegistry
from trainop_core.operator.webhook.certs import new_ca, new_serving
from trainop_core.operator.webhook.review import validate_v2
from trainop_core.operator.webhook.server import V2_KINDS, WebhookServer, v2_webhook_path

RUNTIMES = Path(__file__).resolve().parents[2] / "operator" / "trainer" / "runtimes"


def trainjob(name: str = "tj", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}, **spec},
    }


def review(obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    request: dict[str, Any] = {
        "uid": "u-2",
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": kind},
        "operation": operation,
        "namespace": "team",
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return request


def causes(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in answer["status"]["details"]["causes"]]


def test_an_invalid_trainjob_is_refused_with_every_problem_parse_gives(
    registry: KindRegistry,
) -> None:
    job = trainjob(
        "9.bad",
        runtimeRef={"name": "torch-distributed", "kind": "Deployment", "apiGroup": "apps"},
        trainer={"numNodes": 0},
        activeDeadlineSeconds=0,
    )
    with pytest.raises(InvalidJobError) as caught:
        parse_v2({**job, "metadata": {**job["metadata"], "namespace": "team"}})
    answer = validate_v2(review(job), registry)["response"]
    assert answer["uid"] == "u-2" and answer["allowed"] is False
    status = answer["status"]
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('TrainJob.trainer.kubeflow.org "9.bad" is invalid: ')
    assert causes(answer) == [(p.path, p.message) for p in caught.value.problems]
    fields = {field for field, _ in causes(answer)}
    assert {"metadata.name", "spec.runtimeRef.kind", "spec.runtimeRef.apiGroup",
            "spec.trainer.numNodes", "spec.activeDeadlineSeconds"} <= fields  # fmt: skip


def test_a_value_of_the_wrong_type_is_named(registry: KindRegistry) -> None:
    job = trainjob(trainer={"numProcPerNode": "2"})  # the API server's typing: "2" is no integer
    answer = validate_v2(review(job), registry)["response"]
    assert answer["allowed"] is False
    assert [field for field, _ in causes(answer)] == ["spec.trainer.numProcPerNode"]


def test_a_trainjob_whose_runtime_does_not_exist_yet_is_admitted(registry: KindRegistry) -> None:
    answer = validate_v2(review(trainjob(trainer={"numNodes": 2})), registry)["response"]
    assert answer == {"uid": "u-2", "allowed": True}


def test_managed_by_of_a_trainjob_is_immutable(registry: KindRegistry) -> None:
    old = trainjob()
    new = trainjob(managedBy="kueue.x-k8s.io/multikueue")
    answer = validate_v2(review(new, "UPDATE", old), registry)["response"]
    assert answer["allowed"] is False
    assert causes(answer) == [
        ("spec.managedBy", 'field is immutable (was null, now "kueue.x-k8s.io/multikueue")')
    ]
    # Any other change is fine, and so is the same managedBy.
    same = trainjob(managedBy="kueue.x-k8s.io/multikueue", suspend=True)
    assert validate_v2(review(same, "UPDATE", new), registry)["response"]["allowed"] is True


@pytest.mark.parametrize("path", sorted(RUNTIMES.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_shipped_runtimes_are_admitted_and_a_broken_one_is_not(
    registry: KindRegistry, path: Path
) -> None:
    runtime = yaml.safe_load(path.read_text())
    assert validate_v2(review(runtime), registry)["response"]["allowed"] is True
    broken = copy.deepcopy(runtime)
    broken["spec"]["mlPolicy"]["numNodes"] = "two"
    answer = validate_v2(review(broken), registry)["response"]
    assert answer["allowed"] is False
    assert [field for field, _ in causes(answer)] == ["spec.mlPolicy.numNodes"]
    # As a namespaced TrainingRuntime, the same rules.
    namespaced = {**broken, "kind": "TrainingRuntime"}
    answer = validate_v2(review(namespaced), registry)["response"]
    assert [field for field, _ in causes(answer)] == ["spec.mlPolicy.numNodes"]


def test_deletion_and_other_operations_pass(registry: KindRegistry) -> None:
    bad = trainjob("9.bad", trainer={"numNodes": 0})
    assert validate_v2(review(bad, "DELETE"), registry)["response"]["allowed"] is True
    deleting = {**bad, "metadata": {**bad["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert validate_v2(review(deleting, "UPDATE", bad), registry)["response"]["allowed"] is True


def test_an_object_that_is_no_mapping_is_refused(registry: KindRegistry) -> None:
    request = review(trainjob())
    request["object"] = ["not", "a", "TrainJob"]
    answer = validate_v2(request, registry)["response"]
    assert answer["allowed"] is False and causes(answer)[0][0] == ""


def test_env_the_runtimes_policy_reserves_is_refused_once_the_runtime_is_known(
    registry: KindRegistry,
) -> None:
    from trainop_core.runtimes.catalog import default_catalog

    job = trainjob(trainer={"env": [{"name": "DMLC_TASK_ID", "value": "0"}]})
    job["spec"]["runtimeRef"]["name"] = "xgboost-distributed"
    answer = validate_v2(review(job), registry, default_catalog())["response"]
    assert answer["allowed"] is False
    [(field, message)] = causes(answer)
    assert field == "spec.trainer.env[0].name" and "must not have reserved envs" in message
    # Before the operator's caches hold the runtime, only what the TrainJob says alone counts.
    assert validate_v2(review(job), registry)["response"]["allowed"] is True
    job["spec"]["runtimeRef"]["name"] = "applied-later"
    assert validate_v2(review(job), registry, default_catalog())["response"]["allowed"] is True


# --- the server: these paths only with TrainJob enabled ------------------------------------------
@pytest.fixture
def ca_file(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    from datetime import timedelta

    ca = new_ca(timedelta(days=1))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    yield tmp_path / "ca.crt", new_serving(ca, ["127.0.0.1"], timedelta(days=1))


def post(port: int, ca: Path, path: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", body,
                                     {"Content-Type": "application/json"})  # fmt: skip
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.parametrize("trainjobs", [True, False], ids=["TrainJob enabled", "v1 kinds only"])
def test_the_server_serves_the_v2_paths_only_when_trainjob_is_enabled(
    registry: KindRegistry, ca_file: tuple[Path, Any], trainjobs: bool
) -> None:
    ca, serving = ca_file
    server = WebhookServer("127.0.0.1", 0, registry, trainjobs=trainjobs)
    server.use_certificate(serving.cert_pem, serving.key_pem)
    server.start()
    try:
        bad = trainjob("tj", trainer={"numNodes": 0})
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": review(bad)}).encode()  # fmt: skip
        for kind, _ in V2_KINDS:
            code, answer = post(server.port, ca, v2_webhook_path(kind), body)
            assert code == (200 if trainjobs else 404), (kind, answer)
        if trainjobs:
            code, answer = post(server.port, ca, v2_webhook_path("TrainJob"), body)
            response = json.loads(answer)["response"]
            assert response["allowed"] is False
            assert [c["field"] for c in response["status"]["details"]["causes"]] == [
                "spec.trainer.numNodes"
            ]
    finally:
        server.stop()
