"""The node's side of a container's environment: what every container starts from, and the
ConfigMaps and Secrets read through the API as the node's kubelet identity."""

from __future__ import annotations

import os
from typing import Any

from trainop_core.backends.process.podspec import base_env as interpreter_env
from trainop_core.testing.rest import Rest, RestError

Obj = dict[str, Any]
#: What a container inherits from the node's environment (an image would set its own); the rest
#: of the node's environment (its kubeconfig, tokens) never reaches a container.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LD_LIBRARY_PATH")


def pod_hostname(pod: Obj) -> str:
    """The pod's hostname: `spec.hostname`, else its name (at most 63 characters)."""
    return str(pod["spec"].get("hostname") or pod["metadata"]["name"])[:63]


def base_env(pod: Obj) -> dict[str, str]:
    """What every container of `pod` starts from: a few of the node's variables with this
    interpreter first on PATH, unbuffered Python output (live logs), and HOSTNAME."""
    kept = {k: v for k, v in os.environ.items() if k in INHERITED}
    env = interpreter_env(kept)
    env["HOSTNAME"] = pod_hostname(pod)
    return env


class RestObjects:
    """ConfigMaps and Secrets read from the API server (an ObjectSource)."""

    def __init__(self, rest: Rest) -> None:
        self.rest = rest

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self._get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self._get(f"/api/v1/namespaces/{namespace}/secrets/{name}")

    def _get(self, path: str) -> Obj | None:
        try:
            return self.rest.get(path)
        except RestError as err:
            if err.status == 404:
                return None
            raise
