"""The process node's pure parts, with no cluster: images, env, volumes, back-off."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest

from trainop_core.node.images import NO_IMAGE_REASON, ImageError, program, repository
from trainop_core.node.podenv import ConfigError, container_env, downward_fields
from trainop_core.node.podrun import BACKOFF_MAX, backoff
from trainop_core.node.volumes import prepare_volumes

Obj = dict[str, Any]


class Objects:
    """An ObjectSource holding one ConfigMap and one Secret."""

    def configmap(self, namespace: str, name: str) -> Obj | None:
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
    with pytest.raises(ConfigError, match="leaves its volume"):
        prepare_volumes(a_pod({}, escaping), tmp_path / "other", {}, {}, Objects())
    with pytest.raises(ConfigError, match="persistentVolumeClaim"):
        prepare_volumes(a_pod({}, [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]),
                        tmp_path / "third", {}, {}, Objects())  # fmt: skip


def test_back_off_doubles_from_one_second_up_to_a_minute() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(30) == BACKOFF_MAX == 60.0
