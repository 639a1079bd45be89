"""The webhook server under hostile input: any JSON at any path is answered 200 or 400 (never a
500 and a traceback), a malformed review is refused naming its field, a client hanging up costs
at most one short debug line, and one peer cannot flood the log."""

from __future__ import annotations

import json
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainop_core.kinds.table import KindRegistry, build_registry
from trainop_core.operator.webhook.certs import new_ca, new_serving
from trainop_core.operator.webhook.server import (
    PEER_LOG_BURST,
    PeerLogLimit,
    WebhookServer,
    v2_webhook_path,
    webhook_paths,
)

REGISTRY = build_registry(entry_points=False)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
GOOD_JOB = make_job("PyTorchJob", "ok").master().build()
# A request whose every field may be missing, right, or any JSON at all.
FIELDS = {
    "uid": st.just("u-1"),
    "kind": st.just({"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}),
    "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
    "namespace": st.just("team"),
    "object": st.just(GOOD_JOB) | JSON.map(lambda v: {**GOOD_JOB, "spec": v}),
    "oldObject": st.just(GOOD_JOB),
}
REQUEST = st.fixed_dictionaries({}, optional={key: right | JSON for key, right in FIELDS.items()})
REVIEW = st.builds(lambda r: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "request": r}, REQUEST)  # fmt: skip


@pytest.fixture(scope="module")
def webhooks() -> Iterator[WebhookServer]:
    server = WebhookServer("127.0.0.1", 0, REGISTRY, trainjobs=True)
    yield server  # never started: `answer` is the whole review path after the HTTP framing
    server.stop()


def paths() -> list[str]:
    kind = REGISTRY.get("PyTorchJob")
    return [*webhook_paths(kind), v2_webhook_path("TrainJob")]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=JSON | REVIEW, path=st.sampled_from(paths()))
def test_any_json_is_answered_200_or_400_and_never_500(
    webhooks: WebhookServer, body: Any, path: str
) -> None:
    code, answer = webhooks.answer(path, json.dumps(body).encode())
    assert code in (200, 400), (code, answer)
    if code == 200:
        assert isinstance(answer, dict) and answer["response"]["uid"] == body["request"]["uid"]
        assert isinstance(answer["response"]["allowed"], bool)
    else:
        assert isinstance(answer, str) and answer.startswith("bad request: ")


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        ({"kind": "PyTorchJob"}, "request.kind: must be an object"),
        ({"kind": ["kubeflow.org", "v1"]}, "got an array"),
        ({"kind": {"group": 1, "version": "v1", "kind": "PyTorchJob"}}, "request.kind"),
        ({"operation": ["CREATE"]}, "request.operation: must be one of CREATE"),
        ({"operation": "PATCH"}, 'got "PATCH"'),
        ({"uid": 7}, "request.uid: must be a non-empty string, got a number"),
        ({"namespace": {"a": 1}}, "request.namespace: must be a string, got an object"),
        ({"object": "job"}, "request.object: must be an object or null, got a string"),
        ({"oldObject": [1]}, "request.oldObject"),
    ],
    ids=lambda v: str(v),
)
def test_a_malformed_review_is_refused_400_naming_its_field(
    webhooks: WebhookServer, request_: dict[str, Any], named: str
) -> None:
    request = {
        "uid": "u-1",
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "operation": "CREATE",
        "object": GOOD_JOB,
        **request_,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    code, answer = webhooks.answer(paths()[0], json.dumps(body).encode())
    assert code == 400 and named in str(answer), answer


def test_one_peer_gets_a_burst_of_lines_then_one_note_then_silence() -> None:
    now = [0.0]
    limit = PeerLogLimit(clock=lambda: now[0])
    said = [limit.allow("10.0.0.1") for _ in range(PEER_LOG_BURST + 50)]
    assert said[: PEER_LOG_BURST - 1] == ["yes"] * (PEER_LOG_BURST - 1)
    assert said[PEER_LOG_BURST - 1] == "last"  # with "further lines ... are dropped"
    assert set(said[PEER_LOG_BURST:]) == {"no"}
    assert limit.allow("10.0.0.2") == "yes"  # another peer is not silenced by the first
    now[0] += 3600
    assert limit.allow("10.0.0.1") == "yes"  # the budget refills with time


def test_the_limit_remembers_a_bounded_number_of_peers() -> None:
    limit = PeerLogLimit(clock=lambda: 0.0)
    for i in range(100_000):
        limit.allow(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(limit) <= PeerLogLimit.MAX_PEERS


# --- over TLS: hang-ups ---------------------------------------------------------------------------
@pytest.fixture
def serving(registry: KindRegistry) -> Iterator[tuple[WebhookServer, ssl.SSLContext]]:
    from datetime import timedelta

    ca = new_ca(timedelta(days=1))
    cert = new_serving(ca, ["127.0.0.1"], timedelta(days=1))
    server = WebhookServer("127.0.0.1", 0, registry)
    server.use_certificate(cert.cert_pem, cert.key_pem)
    server.start()
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    yield server, client
    server.stop()


def hang_up_mid_request(port: int, client: ssl.SSLContext, abort: bool) -> None:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    tls = client.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(b"POST /validate-kubeflow-org-v1-pytorchjob HTTP/1.1\r\nContent-Length: 1000\r\n")
    if abort:  # a reset, without TLS's close_notify: the server's next read fails
        tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    tls.close()


HANG_UPS = PEER_LOG_BURST - 1  # within one peer's budget: each hang-up's own line shows


@pytest.mark.parametrize("abort", [False, True], ids=["closing", "resetting the connection"])
def test_a_client_hanging_up_costs_at_most_one_short_debug_line(
    serving: Any, abort: bool, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    server, client = serving
    caplog.set_level(logging.DEBUG, logger="trainop_core.operator.webhook")
    for _ in range(HANG_UPS):
        hang_up_mid_request(server.port, client, abort)
    # The server goes on answering (and so has finished with the hung-up connections' threads).
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /nowhere HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert tls.recv(100).startswith(b"HTTP/1.1 404")
    records = [r for r in caplog.records if r.name.startswith("trainop_core.operator.webhook")]
    assert all(r.levelno <= logging.DEBUG for r in records), [r.getMessage() for r in records]
    assert len(records) <= HANG_UPS and all("\n" not in r.getMessage() for r in records)
    assert not any(r.exc_info for r in records)
    assert "Traceback" not in capfd.readouterr().err  # socketserver's own printing


# --- the certificate directory's default ---------------------------------------------------------
def test_outside_a_cluster_the_cert_dir_default_is_private_not_under_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from trainop_core.operator.webhook import options
    from trainop_core.operator.webhook.options import IN_CLUSTER_CERT_DIR, default_cert_dir

    # whatever machine runs this (it may itself be a pod): no service account mounted
    monkeypatch.setattr(options, "SERVICE_ACCOUNT_DIR", str(tmp_path / "no-service-account"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cert_dir() == str(tmp_path / ".trainop" / "webhook-certs")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # but no service account mounted
    assert default_cert_dir() != IN_CLUSTER_CERT_DIR


def test_outside_a_cluster_a_cert_dir_other_users_may_write_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """External certificates from a directory another local user could plant are never served;
    made private, the same files are."""
    from datetime import timedelta

    from trainop_core.operator.webhook.certs import new_ca, new_serving
    from trainop_core.operator.webhook.rotator import External

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    certs = tmp_path / "certs"
    certs.mkdir()
    serving = new_serving(new_ca(timedelta(days=1)), ["127.0.0.1"], timedelta(days=1))
    (certs / "tls.key").write_bytes(serving.key_pem)
    (certs / "tls.crt").write_bytes(serving.cert_pem)
    served: list[bytes] = []
    external = External(str(certs), lambda cert, key: served.append(cert), check_period=1.0)
    for path, mode in ((certs, 0o777), (certs / "tls.key", 0o666)):
        path.chmod(mode)
        with pytest.raises(ValueError, match=f"{path} may be written by other users"):
            external.check()
        assert served == [] and not external.ready.is_set()
        path.chmod(0o700 if path == certs else 0o600)
    external.check()
    assert served == [serving.cert_pem] and external.ready.is_set()
