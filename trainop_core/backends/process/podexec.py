"""`kubectl exec` for pods that are processes, and the ConfigMaps a kind plans, as files.

A process backend writes, for each pod it starts, an exec spec (its main container's env, working
directory and the pod's process markers) into a private directory, and removes it when the pod
stops. The agent

    python -m trainop_core.backends.process.podexec SPECS_DIR POD COMMAND...

then runs `/bin/sh -c "COMMAND..."` as if inside POD: with that container's env, working
directory and hostname (the pod's name, as on Kubernetes), and marked as the pod's, so whatever
it starts is killed with the pod. That is what an
MPI launcher's rsh agent needs (`AGENT HOST COMMAND...`, the host being a worker's pod name), and
what upstream's kubexec.sh does with `kubectl exec POD -- /bin/sh -c "$*"`. `write_agent` writes
that call as one executable file, the form every MPI's launcher takes.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainop_core.backends.process.podspec import Step
from trainop_core.private_files import read_state_bytes, replace

AGENT_NAME = "exec-agent"
#: an exec spec is a container's env and working directory: far below this
MAX_SPEC_BYTES = 4 * 1024 * 1024
CLONE_NEWUTS = 0x04000000  # <sched.h>


def write_exec_spec(specs: Path, pod: str, step: Step, markers: Mapping[str, str]) -> None:
    """Make `pod` exec-able: its main container's env and working directory, and its markers."""
    specs.mkdir(mode=0o700, parents=True, exist_ok=True)
    spec = {"env": dict(step.env), "cwd": step.cwd, "markers": dict(markers)}
    replace(specs / f"{pod}.json", json.dumps(spec))


def remove_exec_spec(specs: Path, pod: str) -> None:
    """`pod` stopped: nothing can be exec'd in it any more (idempotent)."""
    (specs / f"{pod}.json").unlink(missing_ok=True)


def write_agent(path: Path, specs: Path) -> Path:
    """The agent as one executable file (an rsh agent is a path): `AGENT POD COMMAND...`."""
    call = shlex.join([sys.executable, "-m", __name__, str(specs)])
    return replace(path, f'#!/bin/sh\nexec {call} "$@"\n', mode=0o700)


def write_configmaps(directory: Path, objects: Sequence[Mapping[str, Any]]) -> bool:
    """Each planned ConfigMap's data as files `<directory>/<name>/<key>` (executable: a script
    mounted with mode 0555 must run); True if anything changed."""
    changed = False
    for obj in objects:
        if obj.get("kind") != "ConfigMap":
            continue
        where = directory / str(obj["metadata"]["name"])
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        for key, text in (obj.get("data") or {}).items():
            path = where / key
            if not path.exists() or path.read_text() != text:
                replace(path, text, mode=0o700)
                changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print("usage: podexec SPECS_DIR POD COMMAND...", file=sys.stderr)
        return 2
    specs, pod, command = Path(args[0]), args[1], args[2:]
    if "/" in pod or pod.startswith("."):
        print(f"trainop exec: {pod!r} is not a pod name", file=sys.stderr)
        return 1
    try:
        spec = json.loads(read_state_bytes(specs / f"{pod}.json", MAX_SPEC_BYTES))
    except FileNotFoundError:
        print(f'trainop exec: pod "{pod}" does not exist or is not running', file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # a link, a FIFO, too large, not JSON: not trainop's
        print(f"trainop exec: the exec spec of pod {pod!r} is damaged: {exc}", file=sys.stderr)
        return 1
    os.chdir(spec["cwd"])
    env = {**spec["env"], **spec["markers"]}
    if not own_hostname(pod):
        print(
            f"trainop exec: {pod} keeps this machine's hostname (a UTS namespace needs root): "
            "MPI takes the workers of one machine for one node",
            file=sys.stderr,
        )
    os.execve("/bin/sh", ["/bin/sh", "-c", " ".join(command)], env)
    return 127  # not reached: execve replaces this process or raises


def own_hostname(name: str) -> bool:
    """Give this process (and what it starts) the hostname `name`, as a pod's hostname is its
    name on Kubernetes: MPI tells its nodes apart by hostname, and would otherwise take every
    worker of this machine for one node. A UTS namespace of its own; False where not allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        return False
    socket.sethostname(name)
    return True


if __name__ == "__main__":
    sys.exit(main())
