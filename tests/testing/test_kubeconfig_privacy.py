"""The control plane's kubeconfigs hold a bearer token: written private, their values YAML data."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainop_core.testing.controlplane import write_kubeconfig


def test_a_kubeconfig_is_private_and_its_values_are_data(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    path.chmod(0o644)  # an existing file is tightened too
    user = "u\nusers: []\ncurrent-context: evil"
    namespace = "ns: {evil: true}"
    write_kubeconfig(path, "https://127.0.0.1:1", b"pem", "tok", user=user, namespace=namespace)
    config = yaml.safe_load(path.read_text())
    assert path.stat().st_mode & 0o777 == 0o600
    assert config["current-context"] == "trainop-test"
    assert config["users"] == [{"name": user, "user": {"token": "tok"}}]
    assert config["contexts"][0]["context"]["namespace"] == namespace
