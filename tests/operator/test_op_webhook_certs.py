"""The webhook certificates' rules (pure): what counts as due, foreign or incomplete, and which
CAs a bundle keeps; and how the rotator reports a webhook configuration that is not there yet."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from trainop_core.operator.kube import ApiError, Obj, Resource
from trainop_core.operator.webhook.certs import (
    KeyPair,
    Validity,
    bundle_with,
    new_ca,
    new_serving,
    split_bundle,
    valid_ca,
    valid_serving,
)
from trainop_core.operator.webhook.rotator import VALIDATING, SelfManaged

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)
HOSTS = ["training-operator.kubeflow.svc", "127.0.0.1"]


def test_a_serving_certificate_is_due_near_expiry_for_another_ca_or_a_missing_host() -> None:
    ca = new_ca(10 * DAY, NOW)
    serving = new_serving(ca, HOSTS, 5 * DAY, NOW)
    assert valid_serving(serving, ca.cert_pem, HOSTS, NOW, DAY)
    assert not valid_serving(serving, ca.cert_pem, HOSTS, NOW + 4.5 * DAY, DAY)  # in lookahead
    assert not valid_serving(serving, new_ca(10 * DAY, NOW).cert_pem, HOSTS, NOW, DAY)
    assert not valid_serving(serving, ca.cert_pem, [*HOSTS, "extra.example"], NOW, DAY)
    foreign_key = KeyPair(serving.cert_pem, new_serving(ca, HOSTS, 5 * DAY, NOW).key_pem)
    assert not valid_serving(foreign_key, ca.cert_pem, HOSTS, NOW, DAY)
    assert not valid_serving(KeyPair(b"", b""), ca.cert_pem, HOSTS, NOW, DAY)


def test_a_ca_is_due_in_its_lookahead_or_when_its_key_does_not_match() -> None:
    ca = new_ca(10 * DAY, NOW)
    assert valid_ca(ca, NOW, DAY)
    assert not valid_ca(ca, NOW + 9.5 * DAY, DAY)
    assert not valid_ca(KeyPair(ca.cert_pem, new_ca(10 * DAY, NOW).key_pem), NOW, DAY)
    assert not valid_ca(KeyPair(b"garbage", b"garbage"), NOW, DAY)


def test_a_bundle_keeps_the_new_ca_first_then_old_ones_until_they_expire() -> None:
    old, older = new_ca(10 * DAY, NOW), new_ca(2 * DAY, NOW)
    fresh = new_ca(10 * DAY, NOW)
    bundle = bundle_with(fresh.cert_pem, old.cert_pem + older.cert_pem, NOW + 3 * DAY)
    assert split_bundle(bundle) == [fresh.cert_pem, old.cert_pem]  # `older` had expired
    assert split_bundle(bundle_with(fresh.cert_pem, bundle, NOW)) == split_bundle(bundle)


class _Configurations:
    """A client whose webhook configuration appears after `absent` reads (kubectl applies it
    after the operator's Deployment); `replace` keeps what was written."""

    def __init__(self, absent: int) -> None:
        self.absent, self.written = absent, list[Obj]()

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        if self.absent:
            self.absent -= 1
            raise ApiError(404, "NotFound", f"{name} not found")
        return {"metadata": {"name": name}, "webhooks": [{"name": "v.kubeflow.org"}]}

    def replace(self, resource: Resource, namespace: str, name: str, body: Obj) -> Obj:
        self.written.append(body)
        return body


def test_a_missing_configuration_is_reported_once_then_when_it_appears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator run without its webhook configurations said so every minute, forever."""
    client: Any = _Configurations(absent=3)
    rotator = SelfManaged(
        client, "kubeflow", "webhook-certs", tuple(HOSTS), ((VALIDATING, "validator"),),
        Validity(), lambda cert, key: None, 60.0,
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="trainop_core.operator.webhook.rotator"):
        for _ in range(3):
            rotator._inject(b"bundle")
        assert rotator.missing == 3
        assert [r.getMessage() for r in caplog.records] == [
            "no ValidatingWebhookConfiguration validator yet: its caBundle waits"
        ]
        rotator._inject(b"bundle")
    assert rotator.missing == 0
    assert caplog.records[-1].getMessage() == (
        "ValidatingWebhookConfiguration validator is there: writing its caBundle"
    )
    assert client.written[0]["webhooks"][0]["clientConfig"]["caBundle"] == "YnVuZGxl"
