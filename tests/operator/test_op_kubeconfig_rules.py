"""What a kubeconfig cannot have honoured stops the start, naming the key; which servers the
proxy environment sends around the proxy (Go's NO_PROXY rules). No server needed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop_core.operator.connection import ConfigError
from trainop_core.operator.kubeconfig import bypasses_proxy, kubeconfig_connection, load_connection
from trainop_core.operator.run import main

PLUGIN = {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}


def config(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **(cluster or {})}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def write(tmp_path: Path, content: dict[str, Any]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(content))
    return path


REFUSED = [
    pytest.param(
        {"auth-provider": {"name": "oidc"}},
        {},
        {},
        r"users\[u\]\.auth-provider: auth-provider plugins are not supported",
        id="an auth-provider",
    ),
    pytest.param(
        {"token": "t", "color": "blue"},
        {},
        {},
        r"users\[u\]\.color: is not a setting",
        id="an unknown user key",
    ),
    pytest.param(
        {"token": "t"},
        {"compression": "zstd"},
        {},
        r"clusters\[c\]\.compression: is not a setting",
        id="an unknown cluster key",
    ),
    pytest.param(
        {"token": "t"},
        {"proxy-url": "socks5://127.0.0.1:1080"},
        {},
        r"clusters\[c\]\.proxy-url 'socks5://127\.0\.0\.1:1080': SOCKS proxies are not supported",
        id="a socks5 proxy-url",
    ),
    pytest.param(
        {"token": "t"},
        {"server": "https://api.example.com"},
        {"HTTPS_PROXY": "socks5://proxy:1080"},
        r"HTTPS_PROXY 'socks5://proxy:1080': SOCKS",
        id="a socks5 HTTPS_PROXY",
    ),
    pytest.param(
        {"token": "t", "username": "u", "password": "p"},
        {},
        {},
        r"users\[u\]: token and username",
        id="a token with basic auth",
    ),
    pytest.param(
        {"token": "t", "exec": PLUGIN},
        {},
        {},
        r"users\[u\]: exec and token",
        id="a token with an exec plugin",
    ),
    pytest.param(
        {"token": "t", "as-groups": ["g"]},
        {},
        {},
        r"users\[u\]\.as-groups needs `as`",
        id="as-groups without as",
    ),
    pytest.param(
        {"client-certificate": "c.crt"},
        {},
        {},
        r"users\[u\]\.client-key is missing",
        id="a certificate without its key",
    ),
    pytest.param(
        {"token": "t"},
        {"insecure-skip-tls-verify": True, "certificate-authority": "ca"},
        {},
        r"clusters\[c\]: insecure-skip-tls-verify with a certificate-authority",
        id="insecure with a CA",
    ),
    pytest.param(
        {"exec": {**PLUGIN, "interactiveMode": "Always"}},
        {},
        {},
        r"users\[u\]\.exec\.interactiveMode Always",
        id="an always-interactive exec plugin",
    ),
    pytest.param(
        {"exec": {**PLUGIN, "apiVersion": "client.authentication.k8s.io/v1alpha1"}},
        {},
        {},
        r"users\[u\]\.exec\.apiVersion 'client\.authentication\.k8s\.io/v1alpha1'",
        id="an exec plugin of a removed version",
    ),
    pytest.param(
        {"exec": {**PLUGIN, "shell": "bash"}},
        {},
        {},
        r"users\[u\]\.exec\.shell is not an exec plugin setting",
        id="an unknown exec key",
    ),
    pytest.param(
        {"exec": {**PLUGIN, "command": "/nonexistent/plugin", "installHint": "apt install it"}},
        {},
        {},
        r"users\[u\]\.exec\.command '/nonexistent/plugin' cannot run: .* \(apt install it\)",
        id="an exec plugin that is not there",
    ),
    pytest.param(
        {"token": "t"},
        {"server": "ftp://x"},
        {},
        r"clusters\[c\]\.server 'ftp://x'",
        id="a server that is not http",
    ),
]


@pytest.mark.parametrize(("user", "cluster", "environ", "message"), REFUSED)
def test_a_setting_that_cannot_be_honoured_is_refused_naming_its_key(
    tmp_path: Path,
    user: dict[str, Any],
    cluster: dict[str, Any],
    environ: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        kubeconfig_connection(write(tmp_path, config(user, cluster)), environ=environ)


def test_keys_of_users_and_clusters_not_in_use_are_not_read(tmp_path: Path) -> None:
    content = config({"token": "t"})
    content["users"].append({"name": "other", "user": {"auth-provider": {"name": "gcp"}}})
    kubeconfig_connection(write(tmp_path, content), environ={})


def test_the_operator_refuses_to_start_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, config({"token": "t"}, {"proxy-url": "socks5://127.0.0.1:1080"}))
    assert main(["--kubeconfig", str(path), "--metrics-bind-address", "0"]) == 1
    err = capsys.readouterr().err
    assert "cannot start" in err and "clusters[c].proxy-url" in err and "SOCKS" in err


def test_merged_kubeconfig_files_the_first_to_name_an_entry_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text(
        yaml.safe_dump(
            {"current-context": "x", "users": [{"name": "u", "user": {"token": "first"}}]}
        )
    )
    second.write_text(yaml.safe_dump(config({"token": "second"})))
    missing = tmp_path / "missing"  # client-go skips a missing file of the list
    listed = os.pathsep.join(str(p) for p in (missing, first, second))
    connection = load_connection("", {"KUBECONFIG": listed})
    assert connection.authorization() == "Bearer first"
    assert connection.server == "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "direct"),
    [
        ("api.example.com", 443, "", False),
        ("api.example.com", 443, "*", True),
        ("api.example.com", 443, "example.com", True),
        ("example.com", 443, "example.com", True),
        ("api.example.com", 443, ".example.com", True),
        ("example.com", 443, ".example.com", False),
        ("api.example.com", 443, "*.example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("api.example.com", 443, "example.com:443", True),
        ("api.example.com", 6443, "example.com:443", False),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("10.1.2.3", 443, "10.1.2.3", True),
        ("fd00::1", 443, "fd00::/8", True),
        ("API.Example.COM", 443, " other.org , example.com ", True),
        ("localhost", 443, "", True),
        ("127.0.0.5", 443, "", True),
        ("::1", 443, "", True),
    ],
    ids=lambda v: str(v),
)
def test_no_proxy_follows_go(host: str, port: int, no_proxy: str, direct: bool) -> None:
    assert bypasses_proxy(host, port, no_proxy) is direct
