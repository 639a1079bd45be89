"""The node's side of a container's environment: what every container starts from, and the
ConfigMaps and Secrets read through the API as the node's kubelet identity."""

from __future__ import annotations

import os
import sys
from pathlib import Path
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


def base_env(pod: Obj, tools: Path) -> dict[str, str]:
    """What every container of `pod` starts from: a few of the node's variables with this
    interpreter first on PATH and the node's `tools` next, unbuffered Python output (live
    logs), and HOSTNAME."""
    kept = {k: v for k, v in os.environ.items() if k in INHERITED}
    env = interpreter_env(kept)
    first, _, rest = env["PATH"].partition(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in (first, str(tools), rest) if p)
    env["HOSTNAME"] = pod_hostname(pod)
    return env


# busybox's `nslookup NAME`, which upstream's PyTorchJob init container runs to wait for its
# master's name: exit 0 once NAME resolves, 1 if not (images are not unpacked on a process node).
_NSLOOKUP = """import socket, sys
try:
    print("Name:", sys.argv[1]); print("Address:", socket.gethostbyname(sys.argv[1]))
except (OSError, IndexError) as exc:
    sys.exit(f"nslookup: can't resolve {sys.argv[1:]}: {exc}")
"""
TOOLS = {"nslookup": _NSLOOKUP}


def install_tools(directory: Path) -> Path:
    """Write the node's container tools (:data:`TOOLS`, run by this interpreter) into
    `directory`; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in TOOLS.items():
        path = directory / name
        path.write_text(f"#!{sys.executable}\n{source}")
        path.chmod(0o755)
    return directory


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
