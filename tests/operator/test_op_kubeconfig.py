"""Kubeconfigs honoured or refused, never half-read (issue 24, point 4), on the real
kube-apiserver: impersonation, tokenFile over token, exec plugins (expiry, 401), TLS refusals,
proxies (kubeconfig `proxy-url`, HTTPS_PROXY and NO_PROXY) through a real CONNECT proxy."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop_core.operator.connection import Connection
from trainop_core.operator.kube import PODS, ApiError, KubeClient
from trainop_core.operator.kubeconfig import kubeconfig_connection, load_connection
from trainop_core.testing.connectproxy import ConnectProxy
from trainop_core.testing.controlplane import ControlPlane

#: A name no resolver knows (RFC 2606): only the test proxy can reach the server by it.
PROXIED_HOST = "apiserver.trainop.invalid"
#: A name in the API server's self-signed certificate (as is 127.0.0.1; localhost is not).
CERT_NAME = "kubernetes"


def kubeconfig(
    cp: ControlPlane, user: dict[str, Any], cluster: dict[str, Any] | None = None
) -> dict[str, Any]:
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cp.url, "certificate-authority-data": ca,
                                               **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip


def connect(
    tmp_path: Path, config: dict[str, Any], environ: dict[str, str] | None = None
) -> Connection:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return kubeconfig_connection(path, environ=environ or {})


def list_pods(connection: Connection, namespace: str) -> dict[str, Any]:
    return KubeClient(connection, qps=-1).list(PODS, namespace)


def port_of(cp: ControlPlane) -> int:
    return int(cp.url.rsplit(":", 1)[1])


# --- impersonation --------------------------------------------------------------------------
def test_impersonation_sends_every_impersonate_header(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The server reports the identity it acted as: the user, uid, groups and extra asked for."""
    user = {
        "token": control_plane.admin_token,
        "as": "ada",
        "as-uid": "uid-1",
        "as-groups": ["team-a", "team-b"],
        "as-user-extra": {"reason": ["audit", "on call"]},
    }
    client = KubeClient(connect(tmp_path, kubeconfig(control_plane, user)), qps=-1)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    info = client.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)[
        "status"
    ]["userInfo"]
    assert info["username"] == "ada"
    assert info["uid"] == "uid-1"
    assert {"team-a", "team-b"} <= set(info["groups"])
    assert info["extra"]["reason"] == ["audit", "on call"]


def test_an_impersonated_user_without_rights_is_refused_where_the_admin_succeeds(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    admin = {"token": control_plane.admin_token}
    assert (
        list_pods(connect(tmp_path, kubeconfig(control_plane, admin)), k8s_namespace)["items"] == []
    )
    nobody = {**admin, "as": "nobody-with-no-rights"}
    with pytest.raises(ApiError) as refused:
        list_pods(connect(tmp_path, kubeconfig(control_plane, nobody)), k8s_namespace)
    assert refused.value.status == 403
    assert "nobody-with-no-rights" in refused.value.message


# --- tokenFile --------------------------------------------------------------------------------
def test_a_token_file_wins_over_an_inline_token(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(control_plane.admin_token)
    user = {"token": "not-a-token", "tokenFile": "token"}
    assert list_pods(connect(tmp_path, kubeconfig(control_plane, user)), k8s_namespace)


def test_a_token_file_rotated_after_a_401_is_read_at_once(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("an-old-token")
    connection = connect(tmp_path, kubeconfig(control_plane, {"tokenFile": "token"}))
    with pytest.raises(ApiError) as refused:
        list_pods(connection, k8s_namespace)
    assert refused.value.status == 401
    token.write_text(control_plane.admin_token)  # rotated; the minute's re-read is far away
    assert list_pods(connection, k8s_namespace)["items"] == []


# --- exec plugins -----------------------------------------------------------------------------
PLUGIN = """\
import json, os, sys
from pathlib import Path
here = Path(__file__).parent
with open(here / "runs", "a") as runs:
    runs.write(json.dumps({"argv": sys.argv[1:], "env": os.environ.get("PLUGIN_ENV"),
                           "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"])}) + "\\n")
status = {"token": (here / "token").read_text()}
expires = (here / "expires").read_text()
if expires:
    status["expirationTimestamp"] = expires
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def exec_user(tmp_path: Path, token: str, expires: str = "") -> dict[str, Any]:
    """A real plugin (a script the test writes) that hands out the token in `token`."""
    (tmp_path / "plugin.py").write_text(PLUGIN)
    (tmp_path / "token").write_text(token)
    (tmp_path / "expires").write_text(expires)
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), "--flag"],
        "env": [{"name": "PLUGIN_ENV", "value": "from-kubeconfig"}],
        "interactiveMode": "Never",
        "provideClusterInfo": True,
    }
    return {"exec": plugin}


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


def test_an_exec_plugin_runs_with_its_args_and_env_and_its_token_is_used(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()
    connection = connect(
        tmp_path, kubeconfig(control_plane, exec_user(tmp_path, control_plane.admin_token, later))
    )
    assert list_pods(connection, k8s_namespace)["items"] == []
    assert list_pods(connection, k8s_namespace)["items"] == []
    [run] = runs(tmp_path)  # run once at start; the credential holds until it expires
    assert run["argv"] == ["--flag"]
    assert run["env"] == "from-kubeconfig"
    assert run["info"]["spec"]["interactive"] is False
    assert run["info"]["spec"]["cluster"]["server"] == control_plane.url


def test_an_expired_exec_credential_is_renewed_before_it_is_sent(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    past = (now - dt.timedelta(seconds=1)).isoformat()
    user = exec_user(tmp_path, control_plane.admin_token, past)
    connection = connect(tmp_path, kubeconfig(control_plane, user))
    assert len(runs(tmp_path)) == 1
    (tmp_path / "expires").write_text((now + dt.timedelta(hours=1)).isoformat())
    list_pods(connection, k8s_namespace)
    assert len(runs(tmp_path)) == 2  # expired at the request: run again first
    list_pods(connection, k8s_namespace)
    assert len(runs(tmp_path)) == 2  # the new one holds


def test_a_401_runs_the_exec_plugin_again_and_the_request_goes_through(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    connection = connect(tmp_path, kubeconfig(control_plane, exec_user(tmp_path, "revoked-token")))
    (tmp_path / "token").write_text(control_plane.admin_token)  # what the plugin gives next
    assert list_pods(connection, k8s_namespace)["items"] == []
    assert len(runs(tmp_path)) == 2


def test_a_plugin_that_fails_stops_the_start_naming_the_key(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false"}}
    with pytest.raises(ValueError, match=r"users\[u\]\.exec\.command 'false' exited with 1"):
        connect(tmp_path, kubeconfig(control_plane, user))


# --- TLS --------------------------------------------------------------------------------------
def refusal(connection: Connection) -> str:
    with pytest.raises(ApiError) as refused:
        list_pods(connection, "default")
    assert refused.value.status == 0  # no answer: the TLS handshake failed
    return refused.value.message


def test_a_server_certificate_from_another_ca_is_refused(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    from trainop_core.operator.webhook.certs import new_ca  # any other CA will do

    other_ca = new_ca(dt.timedelta(days=1)).cert_pem
    cluster = {"certificate-authority-data": base64.b64encode(other_ca).decode()}
    config = kubeconfig(control_plane, {"token": control_plane.admin_token}, cluster)
    assert "CERTIFICATE_VERIFY_FAILED" in refusal(connect(tmp_path, config))


@pytest.mark.parametrize(
    ("server_host", "tls_server_name"),
    [("localhost", None), ("127.0.0.1", "not-the-apiserver.example")],
    ids=["a server name the certificate lacks", "a tls-server-name the certificate lacks"],
)
def test_a_certificate_for_another_name_is_refused(
    control_plane: ControlPlane, tmp_path: Path, server_host: str, tls_server_name: str | None
) -> None:
    cluster: dict[str, Any] = {"server": f"https://{server_host}:{port_of(control_plane)}"}
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    config = kubeconfig(control_plane, {"token": control_plane.admin_token}, cluster)
    message = refusal(connect(tmp_path, config))
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "match" in message  # a hostname mismatch, not an unknown CA


def test_tls_server_name_is_the_name_the_certificate_is_checked_for(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    cluster = {
        "server": f"https://localhost:{port_of(control_plane)}",
        "tls-server-name": CERT_NAME,
    }
    config = kubeconfig(control_plane, {"token": control_plane.admin_token}, cluster)
    assert list_pods(connect(tmp_path, config), k8s_namespace)["items"] == []


# --- proxies ----------------------------------------------------------------------------------
def proxied_config(cp: ControlPlane, **cluster: Any) -> dict[str, Any]:
    server = f"https://{PROXIED_HOST}:{port_of(cp)}"
    return kubeconfig(cp, {"token": cp.admin_token},
                      {"server": server, "tls-server-name": CERT_NAME, **cluster})  # fmt: skip


def test_a_kubeconfig_proxy_url_carries_every_request(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}, credentials="me:s3cret") as proxy:
        url = proxy.url.replace("http://", "http://me:s3cret@")
        config = proxied_config(control_plane, **{"proxy-url": url})
        connection = connect(tmp_path, config, {"NO_PROXY": PROXIED_HOST})  # proxy-url wins
        assert list_pods(connection, k8s_namespace)["items"] == []
        assert proxy.tunnels == [f"{PROXIED_HOST}:{port_of(control_plane)}"]
        assert proxy.refused == []


def test_an_https_proxy_url_is_spoken_through_tls_checked_with_the_cluster_ca(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """TLS to the proxy, CONNECT inside, the API server's TLS inside that. As in client-go, the
    proxy's certificate is checked with the kubeconfig's CA (here a bundle of both CAs)."""
    import ssl

    from trainop_core.operator.webhook.certs import new_ca, new_serving

    ca = new_ca(dt.timedelta(days=1))
    serving = new_serving(ca, ["127.0.0.1"], dt.timedelta(days=1))
    (tmp_path / "proxy.crt").write_bytes(serving.cert_pem)
    (tmp_path / "proxy.key").write_bytes(serving.key_pem)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "proxy.crt", tmp_path / "proxy.key")
    bundle = base64.b64encode(control_plane.ca_file.read_bytes() + ca.cert_pem).decode()
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}, tls=tls) as proxy:
        assert proxy.url.startswith("https://")
        cluster = {"proxy-url": proxy.url, "certificate-authority-data": bundle}
        connection = connect(tmp_path, proxied_config(control_plane, **cluster))
        client = KubeClient(connection, qps=-1)
        assert client.list(PODS, k8s_namespace)["items"] == []
        assert client.list(PODS, k8s_namespace)["items"] == []  # the kept-alive tunnel again
        assert proxy.tunnels == [f"{PROXIED_HOST}:{port_of(control_plane)}"]
        pods = PODS.path(k8s_namespace)
        _, lines = client.stream_lines(pods, {"watch": "true", "timeoutSeconds": 1}, (5, 10))
        assert list(lines) == []  # a watch through the tunnel, ended by the server
        assert len(proxy.tunnels) == 2


def test_an_https_proxy_with_a_certificate_the_cluster_ca_does_not_sign_is_refused(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    import ssl

    from trainop_core.operator.webhook.certs import new_ca, new_serving

    serving = new_serving(new_ca(dt.timedelta(days=1)), ["127.0.0.1"], dt.timedelta(days=1))
    (tmp_path / "proxy.crt").write_bytes(serving.cert_pem)
    (tmp_path / "proxy.key").write_bytes(serving.key_pem)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "proxy.crt", tmp_path / "proxy.key")
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}, tls=tls) as proxy:
        message = refusal(
            connect(tmp_path, proxied_config(control_plane, **{"proxy-url": proxy.url}))
        )
        assert "CERTIFICATE_VERIFY_FAILED" in message and "proxy-url" in message
        assert proxy.tunnels == []


def test_a_proxy_refusing_the_tunnel_is_named_in_the_error(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}, credentials="me:s3cret") as proxy:
        config = proxied_config(control_plane, **{"proxy-url": proxy.url})  # no credentials
        message = refusal(connect(tmp_path, config))
        assert "407" in message and "clusters[c].proxy-url" in message
        assert proxy.tunnels == []


def test_https_proxy_from_the_environment_carries_the_requests(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}) as proxy:
        environ = {"HTTPS_PROXY": proxy.url, "NO_PROXY": "example.com,10.0.0.0/8"}
        connection = connect(tmp_path, proxied_config(control_plane), environ)
        assert list_pods(connection, k8s_namespace)["items"] == []
        assert proxy.tunnels == [f"{PROXIED_HOST}:{port_of(control_plane)}"]


@pytest.mark.parametrize("no_proxy", [PROXIED_HOST, ".trainop.invalid", "trainop.invalid", "*"])
def test_no_proxy_sends_the_requests_around_the_proxy(
    control_plane: ControlPlane, tmp_path: Path, no_proxy: str
) -> None:
    """Direct, the name resolves nowhere: the request fails on the lookup, and no tunnel opens."""
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}) as proxy:
        environ = {"https_proxy": proxy.url, "no_proxy": no_proxy}
        message = refusal(connect(tmp_path, proxied_config(control_plane), environ))
        assert "gaierror" in message or "Name or service not known" in message
        assert proxy.tunnels == []


def test_a_loopback_server_is_not_sent_through_the_environment_proxy(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    with ConnectProxy() as proxy:
        config = kubeconfig(control_plane, {"token": control_plane.admin_token})
        connection = connect(tmp_path, config, {"HTTPS_PROXY": proxy.url})
        assert list_pods(connection, k8s_namespace)["items"] == []
        assert proxy.tunnels == []


def test_load_connection_reads_the_proxy_environment(
    control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(proxied_config(control_plane)))
    with ConnectProxy({PROXIED_HOST: "127.0.0.1"}) as proxy:
        connection = load_connection("", {"KUBECONFIG": str(path), "HTTPS_PROXY": proxy.url})
        assert list_pods(connection, k8s_namespace)["items"] == []
        assert len(proxy.tunnels) == 1


# --- exec plugins giving a client certificate -------------------------------------------------
def _client_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, user: str) -> tuple[bytes, bytes]:
    """A client certificate for `user` in group system:masters, signed by the given CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, user),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]  # an EC key, as made above
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture(scope="module")
def cert_plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A control plane that also authenticates client certificates of its own client CA."""
    from trainop_core.operator.webhook.certs import new_ca

    ca = new_ca(dt.timedelta(days=1))
    ca_file = tmp_path_factory.mktemp("client-ca") / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    cp = ControlPlane(controller_manager=False, apiserver_flags=[f"--client-ca-file={ca_file}"])
    with cp:
        yield cp, ca


def test_an_exec_plugin_may_give_a_client_certificate(cert_plane: Any, tmp_path: Path) -> None:
    cp, ca = cert_plane
    cert, key = _client_certificate(ca.cert_pem, ca.key_pem, "cert-user")
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"clientCertificateData": cert.decode(), "clientKeyData": key.decode()},
    }
    (tmp_path / "credential.json").write_text(json.dumps(credential))
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": ["-c", f"print(open({str(tmp_path / 'credential.json')!r}).read())"],
    }
    client = KubeClient(connect(tmp_path, kubeconfig(cp, {"exec": plugin})), qps=-1)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = client.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review
    )
    assert answer["status"]["userInfo"]["username"] == "cert-user"
