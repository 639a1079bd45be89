"""Connecting to a cluster: a kubeconfig (path and context) or the pod's in-cluster service account.

`kubernetes` is imported here, inside functions only, so that importing `trainop_core` (or this
package) never loads it; it is loaded when a kubernetes backend is actually built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.errors import TerminalError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"


class ConfigError(TerminalError):
    """No usable cluster configuration (kubeconfig missing, unknown context, not in a pod)."""


@dataclass(frozen=True)
class Connection:
    """An API client plus the namespace used when a job names none."""

    api_client: Any  # kubernetes.client.ApiClient
    namespace: str


def connect(
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    in_cluster: bool | None = None,
    namespace: str | None = None,
) -> Connection:
    """Build an API client. `in_cluster=None` means: in-cluster when running in a pod and no
    kubeconfig was named (argument or $KUBECONFIG), else the kubeconfig. Does file I/O only."""
    if in_cluster is None:
        in_cluster = _running_in_pod() and kubeconfig is None and not os.environ.get("KUBECONFIG")
    if in_cluster:
        api_client = _in_cluster_client()
        default = _service_account_namespace()
    else:
        # $KUBECONFIG now: the kubernetes package reads it once, when first imported.
        path = os.fspath(kubeconfig) if kubeconfig is not None else os.environ.get("KUBECONFIG")
        api_client = _kubeconfig_client(path or None, context)
        default = _context_namespace(path or None, context)
    return Connection(api_client=api_client, namespace=namespace or default or DEFAULT_NAMESPACE)


def _running_in_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_NAMESPACE.exists()


def _in_cluster_client() -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as exc:
        raise ConfigError(f"in-cluster configuration: {exc}") from exc
    return client.ApiClient(configuration)


def _service_account_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        return ""


def _kubeconfig_client(path: str | None, context: str | None) -> Any:
    from kubernetes import config

    try:
        return config.new_client_from_config(config_file=path, context=context)
    except (config.ConfigException, OSError) as exc:
        where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(f"kubeconfig {where}: {exc}") from exc


def _context_namespace(path: str | None, context: str | None) -> str:
    """The namespace of `context` (or the current context) in the kubeconfig, or ""."""
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError):
        return ""
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else ""
