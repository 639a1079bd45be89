"""The control plane's kubeconfigs hold a bearer token: written private (never through a link,
never at a name another local user can guess), their values YAML data."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml

from trainop_core.testing.cluster import admin_kubeconfig
from trainop_core.testing.cluster import build_parser as cluster_parser
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


def test_a_link_planted_at_a_given_kubeconfig_path_does_not_receive_the_token(
    tmp_path: Path,
) -> None:
    target = tmp_path / "theirs"
    target.write_text("nothing yet")
    link = tmp_path / "kubeconfig"
    link.symlink_to(target)  # another local user's link, planted where ours will be written

    write_kubeconfig(link, "https://127.0.0.1:1", b"pem", "admin-token", user="admin")

    assert target.read_text() == "nothing yet"
    assert not link.is_symlink() and "admin-token" in link.read_text()
    assert link.stat().st_mode & 0o777 == 0o600


def test_the_try_it_cluster_writes_its_admin_kubeconfig_to_an_unpredictable_private_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # what gettempdir() answers
    target = tmp_path / "theirs"
    target.write_text("nothing yet")
    (temp / "trainop-dev-cluster.kubeconfig").symlink_to(target)  # the old fixed name
    before = set(temp.iterdir())

    with admin_kubeconfig(None) as first, admin_kubeconfig(None) as second:
        for path in (first, second):
            write_kubeconfig(path, "https://127.0.0.1:1", b"pem", "admin-token", user="admin")
        assert first.parent != second.parent  # a new name every run
        for path in (first, second):
            assert path.parent.parent == temp and path.parent not in before
            assert path.parent.stat().st_mode & 0o777 == 0o700
            assert path.stat().st_mode & 0o777 == 0o600
            assert "admin-token" in path.read_text()

    assert target.read_text() == "nothing yet"
    assert set(temp.iterdir()) == before  # both removed at the end


def test_the_try_it_cluster_offers_no_fixed_kubeconfig_path() -> None:
    assert cluster_parser().parse_args([]).kubeconfig is None
