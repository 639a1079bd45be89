"""The process node's pure parts, with no cluster: images, env, volumes, back-off."""

from __future__ import annotations

import base64
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from trainop_core.node.images import NO_IMAGE_REASON, ImageError, program, repository
from trainop_core.node.podenv import ConfigError, container_env, downward_fields, service_link_env
from trainop_core.node.podrun import BACKOFF_MAX, backoff
from trainop_core.node.tokens import ServiceAccountTokens, TokenRequest
from trainop_core.node.volumes import prepare_volumes, write_tokens
from trainop_core.testing.rest import RestError

Obj = dict[str, Any]


class Objects:
    """An ObjectSource holding one ConfigMap and one Secret."""

    def configmap(self, namespace: str, name: str) -> Obj | None:
        if name == "kube-root-ca.crt":
            return {"data": {"ca.crt": "CA PEM"}}
        return {"data": {"MODE": "fast", "a.txt": "A"}} if name == "cm" else None

    def secret(self, namespace: str, name: str) -> Obj | None:
        token = base64.b64encode(b"t0k").decode()
        return {"data": {"token": token}} if name == "s" else None


def a_pod(container: Obj, volumes: list[Obj] | None = None) -> Obj:
    meta = {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"team": "ml"}}
    spec = {"containers": [{"name": "main", **container}], "volumes": volumes or []}
    return {"metadata": meta, "spec": spec}


def env_of(container: Obj) -> dict[str, str]:
    pod = a_pod(container)
    fields = downward_fields(pod, "node-0", "10.244.1.2", "127.0.0.1")
    return container_env(pod, pod["spec"]["containers"][0], fields, {"cpu": "2"}, Objects())


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({"command": ["python", "x.py"], "args": ["-v"]}, (sys.executable, "x.py", "-v")),
        ({"command": ["python3", "-c", "1"]}, (sys.executable, "-c", "1")),
        ({"command": ["torchrun", "t.py"]}, ("torchrun", "t.py")),
    ],
    ids=["python is this interpreter", "so is python3", "other commands run as given"],
)
def test_a_container_with_a_command_runs_it(container: Obj, argv: tuple[str, ...]) -> None:
    assert program({"image": "any", **container}, {}).argv == argv


def test_a_container_without_a_command_names_its_image() -> None:
    with pytest.raises(ImageError, match=r"registry\.example/model:1"):
        program({"image": "registry.example/model:1"}, {})
    assert NO_IMAGE_REASON == "ErrImageNeverPull"


def test_the_kubectl_delivery_image_copies_kubectl_and_images_may_have_a_workdir() -> None:
    delivery = program({"image": "kubeflow/kubectl-delivery:latest"}, {})
    assert delivery.argv[0] == sys.executable and "kubectl" in delivery.argv[-1]
    assert repository("docker.io/kubeflow/kubectl-delivery@sha256:ab") == "kubectl-delivery"
    roots = {"ghcr.io/trainop/examples": "/ex"}
    assert (
        program({"image": "ghcr.io/trainop/examples:latest", "command": ["ls"]}, roots).cwd == "/ex"
    )
    assert program({"image": "ghcr.io/trainop/examples", "command": ["ls"],
                    "workingDir": "/w"}, roots).cwd == "/w"  # fmt: skip


def test_env_from_then_env_with_expansion_and_kubelet_order() -> None:
    env = env_of({
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "C_"}],
        "env": [
            {"name": "C_MODE", "value": "overridden $(C_MODE)"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}},
            {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ],
    })  # fmt: skip
    assert env == {"C_MODE": "overridden fast", "C_a.txt": "A", "TOKEN": "t0k",
                   "IP": "10.244.1.2", "TEAM": "ml", "CPUS": "2"}  # fmt: skip


@pytest.mark.parametrize(
    "container",
    [
        {"envFrom": [{"secretRef": {"name": "absent"}}]},
        {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope"}}}]},
        {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nothing"}}}]},
    ],
    ids=["a missing secret", "a missing key", "an unknown field path"],
)
def test_a_missing_reference_is_a_config_error(container: Obj) -> None:
    with pytest.raises(ConfigError):
        env_of(container)


def test_optional_references_may_be_missing() -> None:
    env = env_of({"envFrom": [{"secretRef": {"name": "absent", "optional": True}}],
                  "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {
                      "name": "cm", "key": "nope", "optional": True}}}]})  # fmt: skip
    assert env == {}


def test_volumes_are_written_and_an_item_path_cannot_leave_its_volume(tmp_path: Path) -> None:
    volumes = [{"name": "cfg", "configMap": {"name": "cm", "items": [{"key": "a.txt",
                                                                      "path": "sub/a"}]}},
               {"name": "scratch", "emptyDir": {}}]  # fmt: skip
    pod = a_pod({"command": ["true"]}, volumes)
    paths = prepare_volumes(pod, tmp_path, {}, {}, Objects())
    assert Path(paths["cfg"], "sub", "a").read_text() == "A"
    assert Path(paths["scratch"]).is_dir()
    outside = [{"key": "a.txt", "path": "../../x"}]
    escaping = [{"name": "bad", "configMap": {"name": "cm", "items": outside}}]
    with pytest.raises(ConfigError, match=r"spec\.volumes\[0\]\.configMap\.items\[0\]\.path"):
        prepare_volumes(a_pod({}, escaping), tmp_path / "other", {}, {}, Objects())
    with pytest.raises(ConfigError, match="persistentVolumeClaim"):
        prepare_volumes(a_pod({}, [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]),
                        tmp_path / "third", {}, {}, Objects())  # fmt: skip


def test_back_off_doubles_from_one_second_up_to_a_minute() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(30) == BACKOFF_MAX == 60.0


class Tokens:
    """A TokenSource that numbers the tokens it gives and keeps what was asked."""

    def __init__(self) -> None:
        self.asked: list[TokenRequest] = []

    def token(self, request: TokenRequest) -> bytes:
        self.asked.append(request)
        return f"token-{len(self.asked)}".encode()


def api_access(expiration: object = 3607, path: str = "token") -> list[Obj]:
    """The volume kube-apiserver's ServiceAccount admission adds to every pod."""
    token = {"serviceAccountToken": {"expirationSeconds": expiration, "path": path}}
    ca = {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    namespace = {
        "downwardAPI": {
            "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
        }
    }
    return [{"name": "kube-api-access-x1",
             "projected": {"defaultMode": 0o644, "sources": [token, ca, namespace]}}]  # fmt: skip


def test_the_api_access_volume_holds_a_bound_token_for_the_owner_only(tmp_path: Path) -> None:
    pod = a_pod({}, api_access())
    pod["spec"]["serviceAccountName"] = "robot"
    fields = downward_fields(pod, "node-0", "10.244.1.2", "127.0.0.1")
    tokens = Tokens()
    where = Path(
        prepare_volumes(pod, tmp_path, fields, {}, Objects(), tokens)["kube-api-access-x1"]
    )
    assert (where / "token").read_bytes() == b"token-1"
    assert (where / "token").stat().st_mode & 0o777 == 0o600
    assert (where / "ca.crt").read_text() == "CA PEM"
    assert (where / "namespace").read_text() == "ns"
    assert (where / "ca.crt").stat().st_mode & 0o777 == 0o644
    assert tokens.asked == [TokenRequest("ns", "robot", "", 3607, "p", "u1")]
    write_tokens(pod, tmp_path, tokens)  # the node's refresh rewrites it in place
    assert (where / "token").read_bytes() == b"token-2"
    assert (where / "token").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in where.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("volumes", "field"),
    [
        (api_access(expiration=2**40), "serviceAccountToken.expirationSeconds"),
        (api_access(expiration=60), "serviceAccountToken.expirationSeconds"),
        (api_access(expiration="1e9"), "serviceAccountToken.expirationSeconds"),
        (api_access(path="../../etc/passwd"), "serviceAccountToken.path"),
        (api_access(path="/abs/token"), "serviceAccountToken.path"),
    ],
    ids=["a huge token lifetime is refused", "so is one under ten minutes",
         "and one that is no number", "a token path cannot climb out of its volume",
         "nor be absolute"],
)  # fmt: skip
def test_a_hostile_token_projection_is_refused_naming_its_field(
    volumes: list[Obj], field: str, tmp_path: Path
) -> None:
    tokens = Tokens()
    with pytest.raises(ConfigError, match=r"spec\.volumes\[0\]\.projected\.sources\[0\]\."):
        prepare_volumes(a_pod({}, volumes), tmp_path, {}, {}, Objects(), tokens)
    with pytest.raises(ConfigError, match=field):
        prepare_volumes(a_pod({}, volumes), tmp_path, {}, {}, Objects(), tokens)
    assert tokens.asked == []  # refused before any token was asked for
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


class TokenApi:
    """The TokenRequest API: a token valid `lifetime` seconds from `clock()`, or a refusal."""

    def __init__(self, clock: list[float], lifetime: float) -> None:
        self.clock, self.lifetime, self.bodies = clock, lifetime, list[Obj]()
        self.refuse = False

    def create(self, path: str, body: Obj) -> Obj:
        if self.refuse:
            raise RestError(403, "forbidden")
        self.bodies.append({"path": path, **body})
        expires = datetime.fromtimestamp(self.clock[0] + self.lifetime, timezone.utc)
        stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"token": f"t{len(self.bodies)}", "expirationTimestamp": stamp}}


def test_a_token_is_reused_until_eighty_percent_of_its_lifetime_then_renewed() -> None:
    now = [1_000_000.0]
    api = TokenApi(now, lifetime=1000)
    tokens = ServiceAccountTokens(api, clock=lambda: now[0])
    request = TokenRequest("ns", "robot", "vault", 1000, "p", "u1")
    assert tokens.token(request) == b"t1"
    body = api.bodies[0]
    assert body["path"] == "/api/v1/namespaces/ns/serviceaccounts/robot/token"
    assert body["spec"]["audiences"] == ["vault"] and body["spec"]["expirationSeconds"] == 1000
    assert body["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": "u1"}  # fmt: skip
    now[0] += 799
    assert not tokens.due("u1") and tokens.token(request) == b"t1"
    now[0] += 2
    assert tokens.due("u1") and not tokens.due("u2")
    assert tokens.token(request) == b"t2" and not tokens.due("u1")
    api.refuse = True
    tokens.forget("u1")
    with pytest.raises(ConfigError, match="serviceaccount ns/robot"):
        tokens.token(request)


def test_a_year_long_token_is_still_renewed_within_a_day() -> None:
    now = [0.0]
    tokens = ServiceAccountTokens(TokenApi(now, lifetime=365 * 86400), clock=lambda: now[0])
    tokens.token(TokenRequest("ns", "default", "", 3607, "p", "u1"))
    now[0] += 86400 + 1
    assert tokens.due("u1")


def test_every_container_gets_the_kubernetes_service_links() -> None:
    service = {"metadata": {"name": "kubernetes", "namespace": "default"},
               "spec": {"clusterIP": "10.0.0.1",
                        "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}  # fmt: skip
    links = service_link_env(service)
    assert links == {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBERNETES_SERVICE_PORT_HTTPS": "443",
        "KUBERNETES_PORT": "tcp://10.0.0.1:443",
        "KUBERNETES_PORT_443_TCP": "tcp://10.0.0.1:443",
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_PORT": "443",
        "KUBERNETES_PORT_443_TCP_ADDR": "10.0.0.1",
    }
    pod = a_pod({"env": [{"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST)"},
                         {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]})  # fmt: skip
    env = container_env(pod, pod["spec"]["containers"][0], {}, {}, Objects(), links)
    assert env["API"] == "https://10.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert service_link_env({**service, "spec": {"clusterIP": "None", "ports": []}}) == {}
