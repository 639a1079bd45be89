"""The Kueue fixture's pure parts (no Go, no server): which of Kueue's webhooks are registered and
how, and the metrics certificate Kueue insists on reading. tests/kueue runs the real thing."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from trainop_core.testing.controlplane import ControlPlaneError
from trainop_core.testing.kueue import (
    NAMESPACE_LABEL,
    ensure_metrics_certificate,
    webhook_configurations,
)


def hook(name: str, group: str, resource: str) -> dict:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "path": f"/mutate-{resource}"}},
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "resources": [resource]}],
    }


@pytest.fixture
def source(tmp_path: Path) -> Path:
    manifests = tmp_path / "config" / "components" / "webhook" / "manifests.yaml"
    manifests.parent.mkdir(parents=True)
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            hook("mpod.kb.io", "", "pods"),
            hook("mpytorchjob.kb.io", "kubeflow.org", "pytorchjobs"),
            hook("mmpijob.kb.io", "kubeflow.org", "mpijobs"),
            hook("mclusterqueue.kb.io", "kueue.x-k8s.io", "clusterqueues"),
        ],
    }
    manifests.write_text(yaml.safe_dump(config))
    return tmp_path


def test_only_the_enabled_frameworks_and_kueues_own_objects_get_webhooks(source: Path) -> None:
    [config] = webhook_configurations(
        "https://127.0.0.1:9", b"CA", ["kubeflow.org/pytorchjob"], source=source
    )
    assert config["metadata"] == {"name": "trainop-testing-kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in config["webhooks"]}
    assert sorted(hooks) == ["mclusterqueue.kb.io", "mpytorchjob.kb.io"]  # no pods, no MPIJob
    for h in hooks.values():
        url = f"https://127.0.0.1:9/mutate-{h['rules'][0]['resources'][0]}"
        assert h["clientConfig"] == {"url": url, "caBundle": base64.b64encode(b"CA").decode()}
    # Job webhooks only for labelled namespaces; Kueue's cluster-scoped objects always.
    assert hooks["mpytorchjob.kb.io"]["namespaceSelector"] == {
        "matchLabels": {NAMESPACE_LABEL: "true"}
    }
    assert "namespaceSelector" not in hooks["mclusterqueue.kb.io"]


def test_the_metrics_certificate_is_written_once_and_kept(tmp_path: Path) -> None:
    where = tmp_path / "metrics" / "certs"
    ensure_metrics_certificate(where)
    first = (where / "tls.crt").read_bytes()
    assert first.startswith(b"-----BEGIN CERTIFICATE-----")
    assert (where / "tls.key").read_bytes().startswith(b"-----BEGIN")
    ensure_metrics_certificate(where)
    assert (where / "tls.crt").read_bytes() == first


def test_a_metrics_directory_that_cannot_be_made_says_what_to_run(tmp_path: Path) -> None:
    blocker = tmp_path / "etc-kueue"
    blocker.write_text("a file where the directory would go")  # fails even for root
    with pytest.raises(ControlPlaneError, match=r"sudo mkdir -p .*etc-kueue/certs"):
        ensure_metrics_certificate(blocker / "certs")
