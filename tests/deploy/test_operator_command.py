"""The image's entry point and the Deployment's arguments make a command line the operator takes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from deploy_manifests import KUSTOMIZATIONS, OPERATOR, REPO, find, kustomize

from trainop_core.cli.main import build_parser
from trainop_core.operator.options import options_from_args

DOCKERFILE = OPERATOR / "Dockerfile"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def entrypoint() -> list[str]:
    found = [args for word, args in instructions(DOCKERFILE) if word == "ENTRYPOINT"]
    assert len(found) == 1
    command: list[str] = json.loads(found[0])  # exec form: no shell, signals reach the operator
    return command


def deployment_args(kustomization: str, namespace: str = "kubeflow") -> list[str]:
    deployment = find(kustomize(kustomization), "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    # The kubelet expands $(VAR) references to the container's env before exec.
    return [a.replace("$(POD_NAMESPACE)", namespace).replace("$(POD_IP)", "10.1.2.3") for a in args]


def test_the_entrypoint_is_the_trainop_console_script_running_the_operator() -> None:
    assert entrypoint() == ["trainop", "operator"]
    pyproject = (REPO / "pyproject.toml").read_text()  # (tomllib needs Python 3.11)
    assert re.search(r'^trainop = "trainop_core\.cli\.main:main"$', pyproject, re.MULTILINE)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_deployment_arguments_parse_with_the_operator_parser(kustomization: str) -> None:
    argv = [*entrypoint()[1:], *deployment_args(kustomization)]
    options = options_from_args(build_parser().parse_args(argv))
    assert options.leader_elect
    assert (options.metrics_bind_address, options.metrics_secure) == (":8443", True)
    assert options.health_probe_bind_address == "10.1.2.3:8081"
    expected_namespace = "kubeflow" if kustomization.endswith("namespaced") else ""
    assert options.namespace == expected_namespace
    assert options.webhook.port == 9443
    external = kustomization.endswith("cert-manager")
    assert options.webhook.cert_management == ("external" if external else "self")


def test_an_unknown_flag_would_be_refused() -> None:
    """The parse above is strict: argparse exits on flags the operator does not define."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--no-such-flag"])


def test_the_image_is_slim_python_311_non_root_with_the_package_and_no_extras() -> None:
    steps = instructions(DOCKERFILE)
    froms = [args for word, args in steps if word == "FROM"]
    args = dict(a.split("=", 1) for word, a in steps if word == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    installs = [a for word, a in steps if word == "RUN" and "pip install" in a]
    assert len(installs) == 1
    # ".", not ".[extras]", at the versions CI tested
    assert re.search(r"pip install --no-cache-dir -c constraints\.txt \.(\s|$)", installs[0])
    users = [a for word, a in steps if word == "USER"]
    assert users and users[-1] == "65532:65532"
    exposed = " ".join(a for word, a in steps if word == "EXPOSE").split()
    assert sorted(exposed) == ["8081", "8443", "9443"]


def test_the_build_context_sends_what_pip_needs() -> None:
    """Every path the Dockerfile COPYs is let through by its .dockerignore (BuildKit reads
    operator/Dockerfile.dockerignore for `docker build -f operator/Dockerfile .`)."""
    ignore = (OPERATOR / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [a.split() for word, a in instructions(DOCKERFILE) if word == "COPY"]
    from_context = [c[:-1] for c in copies if not c[0].startswith("--from=")]
    sources = {s for srcs in from_context for s in srcs}
    assert sources <= allowed
    for source in sources:
        assert (REPO / source).exists(), source


def test_operator_dir_is_deployment_assets_only_never_a_python_package() -> None:
    assert not list(OPERATOR.rglob("*.py"))
    assert not list(OPERATOR.rglob("__init__.py"))
