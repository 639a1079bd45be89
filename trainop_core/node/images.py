"""What a process node runs for a container, since it cannot pull or unpack an image.

* A container with a `command` runs `command` + `args` as a process; `python` and `python3`
  are the node's own interpreter (``sys.executable``), whose directory also comes first on PATH.
* A container without one runs only if its image is in :data:`WELL_KNOWN` (a short table of
  images whose behaviour is known and small); any other waits with reason
  :data:`NO_IMAGE_REASON`, naming the image, and never runs.
* An image may be given a root directory (``--image REF=DIR``): its containers start in DIR
  unless they set `workingDir`, as an image's WORKDIR would place them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The waiting reason of a container no process can stand in for: the kubelet's own reason for
#: an image that is not on the node and may not be pulled, so tools read it as "won't start".
NO_IMAGE_REASON = "ErrImageNeverPull"
PYTHON_NAMES = ("python", "python3")

# Upstream MPIJob v1's kubectl-delivery init container copies kubectl into $TARGET_DIR (a volume
# the launcher's main container mounts); the node's own kubectl is what it copies.
_COPY_KUBECTL = (
    "import os, shutil, sys\n"
    "found = shutil.which('kubectl')\n"
    "if not found: sys.exit('kubectl-delivery: no kubectl on this node (PATH)')\n"
    "target = os.environ.get('TARGET_DIR', '/opt/kube')\n"
    "os.makedirs(target, exist_ok=True)\n"
    "shutil.copy2(os.path.realpath(found), os.path.join(target, 'kubectl'))\n"
    "print('kubectl copied to', target)\n"
)

#: image repository (without registry host or tag) -> argv standing in for its entrypoint
WELL_KNOWN: Mapping[str, tuple[str, ...]] = {
    "kubectl-delivery": (sys.executable, "-c", _COPY_KUBECTL),
}


class ImageError(Exception):
    """The container cannot run on a process node: the message names the image."""


@dataclass(frozen=True)
class Program:
    """What to run for one container and where (None: the pod's default directory)."""

    argv: tuple[str, ...]
    cwd: str | None


def repository(image: str) -> str:
    """The image's last path element without tag or digest (``kubeflow/kubectl-delivery:v1``
    -> ``kubectl-delivery``)."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def image_root(image: str, roots: Mapping[str, str]) -> str | None:
    """The directory given for `image` (by full reference, or without its tag)."""
    untagged = image.split("@", 1)[0]
    if ":" in untagged.rsplit("/", 1)[-1]:
        untagged = untagged.rsplit(":", 1)[0]
    return roots.get(image) or roots.get(untagged)


def program(container: Mapping[str, Any], roots: Mapping[str, str]) -> Program:
    """The argv (before `$(VAR)` expansion) and directory for `container`; ImageError if
    nothing can stand in for its image."""
    image = str(container.get("image") or "")
    command = [str(w) for w in container.get("command") or []]
    args = [str(w) for w in container.get("args") or []]
    cwd = container.get("workingDir") or image_root(image, roots)
    if command:
        if command[0] in PYTHON_NAMES:
            command[0] = sys.executable
        return Program((*command, *args), cwd)
    known = WELL_KNOWN.get(repository(image))
    if known is not None:
        return Program((*known, *args), cwd)
    raise ImageError(
        f'image "{image}" cannot be pulled or run by a process node: give the container a '
        f"command (python is {sys.executable})"
    )
