"""The test API server's kubeconfig holds a bearer token: it is written private, as YAML data."""

from __future__ import annotations

from pathlib import Path

import yaml

from trainop_core.testing import ApiServer


def test_the_kubeconfig_is_private_and_its_values_are_data(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    path.chmod(0o644)  # an existing file is tightened too
    context = "ctx: {evil: true}\nusers: []"
    with ApiServer() as server:
        server.write_kubeconfig(path, context=context)
        config = yaml.safe_load(path.read_text())
        token = server.token
    assert path.stat().st_mode & 0o777 == 0o600
    assert config["current-context"] == context
    assert config["users"] == [{"name": context, "user": {"token": token}}]
