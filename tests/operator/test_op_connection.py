"""The operator's own connection: every way of finding the server and credentials, on a real
kube-apiserver (the session's control plane), and no `kubernetes` import on the common path."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop_core.operator.connection import Connection, TokenFile
from trainop_core.operator.kube import PODS, ApiError, KubeClient
from trainop_core.operator.kubeconfig import (
    in_cluster_connection,
    kubeconfig_connection,
    load_connection,
)
from trainop_core.testing.controlplane import ControlPlane


def kubeconfig(
    cp: ControlPlane, user: dict[str, Any], cluster: dict[str, Any] | None = None
) -> dict[str, Any]:
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    cluster = cluster or {"server": cp.url, "certificate-authority-data": ca}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def write(path: Path, config: Any) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def lists_pods(connection: Connection, namespace: str) -> bool:
    answer = KubeClient(connection, qps=-1).list(PODS, namespace)
    return answer.get("kind") == "PodList"


def test_a_token_and_inline_ca_work_without_the_official_client(
    control_plane: ControlPlane, k8s_namespace: str
) -> None:
    connection = load_connection(str(control_plane.kubeconfig))
    assert lists_pods(connection, k8s_namespace)


def test_a_token_file_and_a_ca_path_relative_to_the_kubeconfig(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "ca.crt").write_bytes(control_plane.ca_file.read_bytes())
    (tmp_path / "token").write_text(control_plane.admin_token + "\n")
    config = kubeconfig(
        control_plane,
        {"tokenFile": "token"},
        {"server": control_plane.url, "certificate-authority": "ca.crt"},
    )
    assert lists_pods(kubeconfig_connection(write(tmp_path / "kc", config)), k8s_namespace)


def test_a_wrong_token_is_refused_by_the_server(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    config = kubeconfig(control_plane, {"token": "not-a-token"})
    with pytest.raises(ApiError) as refused:
        lists_pods(kubeconfig_connection(write(tmp_path / "kc", config)), "default")
    assert refused.value.status == 401


def test_an_exec_plugin_of_v1beta1_is_run_without_the_official_client(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": control_plane.admin_token},
    }
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
    }
    config = kubeconfig(control_plane, {"exec": plugin})
    assert lists_pods(load_connection(str(write(tmp_path / "kc", config))), k8s_namespace)


def test_loading_any_kubeconfig_does_not_import_the_official_client(tmp_path: Path) -> None:
    """Every kubeconfig key is read here (kubeconfig.py) or refused: no fallback loader."""
    user = {"token": "t", "as": "someone", "as-groups": ["g"]}
    cluster = {"server": "https://127.0.0.1:6443", "proxy-url": "http://127.0.0.1:3128",
               "disable-compression": True}  # fmt: skip
    config = {
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = write(tmp_path / "kc", config)
    code = (
        "import sys; from trainop_core.operator.kubeconfig import load_connection; "
        f"load_connection({str(path)!r}); print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_in_cluster_the_service_account_token_and_ca_are_used(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = control_plane.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    (tmp_path / "token").write_text(control_plane.admin_token)
    connection = in_cluster_connection(str(tmp_path / "token"), str(control_plane.ca_file))
    assert lists_pods(connection, k8s_namespace)


def test_a_token_file_is_read_again_when_it_rotates(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    token = TokenFile(str(path), reread_seconds=0)
    assert token() == "Bearer first"
    path.write_text("second\n")
    assert token() == "Bearer second"
    assert TokenFile(str(path))() == "Bearer second"


def test_the_operator_does_not_import_the_official_client() -> None:
    """Importing kubernetes.client costs ~55 MiB of resident memory (its generated models)."""
    code = "import sys, trainop_core.operator.manager; print('kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
