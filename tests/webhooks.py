"""The operator's webhook configurations (operator/base/webhooks/) registered on the test's real
kube-apiserver: each webhook pointed at a loopback URL (no Service can be reached here), renamed
after the test's namespace and limited to it (other tests' jobs never reach this webhook). The
ClusterTrainingRuntime webhook is left out: a namespaceSelector does not limit a cluster-scoped
resource, so it would judge every other test's runtimes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainop_core.testing.controlplane import ControlPlane
from trainop_core.testing.rest import RestError

WEBHOOKS = Path(__file__).resolve().parents[1] / "operator" / "base" / "webhooks"
API = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
}


def shipped() -> list[dict[str, Any]]:
    """The validating and mutating configurations as shipped."""
    return [
        yaml.safe_load((WEBHOOKS / f).read_text()) for f in ("validating.yaml", "mutating.yaml")
    ]


def for_test(config: dict[str, Any], namespace: str, port: int, **webhook: Any) -> dict[str, Any]:
    """`config` renamed after `namespace`, its webhooks calling 127.0.0.1:`port` for that
    namespace only, with `webhook`'s fields (e.g. failurePolicy) on every webhook."""
    moved = copy.deepcopy(config)
    moved["metadata"]["name"] = f"{namespace}.{config['metadata']['name']}"
    moved["webhooks"] = [h for h in moved["webhooks"] if not cluster_scoped(h)]
    for hook in moved["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        hook.update(webhook)
    return moved


def cluster_scoped(hook: dict[str, Any]) -> bool:
    """Whether `hook` judges a cluster-scoped resource (no namespaceSelector can limit it)."""
    return all(rule.get("scope") == "Cluster" for rule in hook["rules"])


@dataclass(frozen=True)
class Names:
    validating: str
    mutating: str


@contextmanager
def registered(cp: ControlPlane, namespace: str, port: int, **webhook: Any) -> Iterator[Names]:
    """Both configurations registered for the block (names: `.validating`, `.mutating`)."""
    configs = [for_test(c, namespace, port, **webhook) for c in shipped()]
    for config in configs:
        cp.rest.create(f"{API}/{PLURALS[config['kind']]}", config)
    names = Names(configs[0]["metadata"]["name"], configs[1]["metadata"]["name"])
    try:
        yield names
    finally:
        for config in configs:
            try:
                cp.rest.delete(f"{API}/{PLURALS[config['kind']]}/{config['metadata']['name']}")
            except RestError as err:
                if err.status != 404:
                    raise


def configuration(cp: ControlPlane, kind: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cp.rest.get(f"{API}/{PLURALS[kind]}/{name}")
    return found


def patch_webhooks(cp: ControlPlane, kind: str, name: str, **fields: Any) -> None:
    """Set `fields` on every webhook of configuration `name`."""
    config = configuration(cp, kind, name)
    for hook in config["webhooks"]:
        hook.update(fields)
    cp.rest.replace(f"{API}/{PLURALS[kind]}/{name}", config)
