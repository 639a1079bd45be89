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
# the launcher's main container mounts), then waits until every pod of the hostfile but the
# launcher runs (in $NAMESPACE), so that mpirun finds its workers. The node's own kubectl is what
# it copies; it waits with that kubectl and the pod's in-cluster config (ServiceAccount token).
_COPY_KUBECTL = """import os, shutil, subprocess, sys, time
found = shutil.which('kubectl')
if not found: sys.exit('kubectl-delivery: no kubectl on this node (PATH)')
target = os.environ.get('TARGET_DIR', '/opt/kube')
os.makedirs(target, exist_ok=True)
shutil.copy2(os.path.realpath(found), os.path.join(target, 'kubectl'))
print('kubectl copied to', target, flush=True)
hosts = '/etc/mpi/hostfile'
names = []
for line in (open(hosts).read().splitlines() if os.path.exists(hosts) else []):
    name = line.split(' ', 1)[0].split(':', 1)[0].strip()
    if name and not name.endswith('launcher'):
        names.append(name)
namespace = os.environ.get('NAMESPACE') or 'default'
query = ['kubectl', '-n', namespace, 'get', 'pods', '-o',
         'jsonpath={range .items[*]}{.metadata.name}={.status.phase}{" "}{end}']
said = ''
while names:
    done = subprocess.run(query, capture_output=True, text=True)
    phases = dict(line.split('=', 1) for line in done.stdout.split() if '=' in line)
    waiting = [n for n in names if phases.get(n) != 'Running']
    if not waiting:
        break
    state = done.stderr.strip() or 'waiting for ' + ', '.join(waiting)
    if state != said:
        print(state, flush=True)
        said = state
    time.sleep(1)
print('all workers are running:', ', '.join(names), flush=True)
"""

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
