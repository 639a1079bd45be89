"""Resource limits as cgroups: a container's `resources.limits` become its cgroup's limits.

cgroup v1 (the memory and cpu controllers, mounted at /sys/fs/cgroup/<controller>) or v2 (one
unified hierarchy), under the node process's own cgroup: ``<own>/trainop-node.<pid>.<name>/<pod
uid>/<container>``. The launcher moves a container's first process into it before exec, so all
it starts stays there; the node reads the cgroup's OOM-kill counter to tell OOMKilled from an
ordinary SIGKILL, and kills everything left in it (as a runtime does) when the container ends.

The node's directory carries its pid because several clusters may run on one machine, each with
a "node-0", and their own cgroups are often one (the root of the cpu hierarchy): named by node
name alone, a node starting (which kills what an earlier run left) or stopping killed another
cluster's containers. At start a node removes, killing what is in them, the directories of
owners that no longer run, whatever their name: a crashed node's leftovers.
Where none can be used (no root, read-only, v2 without delegation), :func:`detect` says why
once and the node runs containers without limits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainop_core.gang import parse_quantity

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")
CFS_PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "cpu")
#: a node's cgroup directory is ``trainop-node.<pid>.<node name>`` (node names hold no dot)
LEAF_PREFIX = "trainop-node."
_STALE_NAME = re.compile(re.escape(LEAF_PREFIX) + r"(\d+)\..+")


@dataclass(frozen=True)
class Cgroup:
    """One container's cgroup: a directory per hierarchy (one on v2, two on v1)."""

    dirs: tuple[Path, ...]
    v2: bool

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The files a process writes its pid to, to join."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for want of memory so far."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        text = _read(self.dirs[0] / name)
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            found |= {int(p) for p in _read(Path(path)).split()}
        return found

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup (idempotent)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class Cgroups:
    """This node's cgroups: make one per container, find what an earlier run left."""

    def __init__(self, bases: tuple[Path, ...], v2: bool) -> None:
        self.bases = bases
        self.v2 = v2

    def create(self, pod_uid: str, container: str, limits: Mapping[str, str]) -> Cgroup:
        """The container's cgroup with `limits` (cpu, memory) set; made if needed."""
        dirs = tuple(base / pod_uid / container for base in self.bases)
        for directory in dirs:
            directory.mkdir(parents=True, exist_ok=True)
        group = Cgroup(dirs, self.v2)
        self._limit(group, limits)
        return group

    def _limit(self, group: Cgroup, limits: Mapping[str, str]) -> None:
        memory = str(int(parse_quantity(limits["memory"]))) if limits.get("memory") else ""
        cpu = limits.get("cpu")
        if self.v2:
            _write(group.dirs[0] / "memory.max", memory or "max")
            _write(group.dirs[0] / "memory.swap.max", "0")
            quota = int(parse_quantity(cpu) * CFS_PERIOD_US) if cpu else 0
            limit = str(max(quota, 1000)) if quota else "max"
            _write(group.dirs[0] / "cpu.max", f"{limit} {CFS_PERIOD_US}")
            return
        memory_dir, cpu_dir = group.dirs
        _write(memory_dir / "memory.limit_in_bytes", memory or "-1")
        quota = int(parse_quantity(cpu) * CFS_PERIOD_US) if cpu else -1
        _write(cpu_dir / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        _write(cpu_dir / "cpu.cfs_quota_us", str(max(quota, 1000) if quota > 0 else -1))

    def remove_pod(self, pod_uid: str) -> None:
        """Kill what is left in the pod's cgroups and remove them (idempotent)."""
        for base in self.bases:
            _remove_tree(base / pod_uid)

    def pod_uids(self) -> set[str]:
        """The pods that have cgroups here (an earlier run of this node may have left some)."""
        bases = [base for base in self.bases if base.is_dir()]
        return {d.name for base in bases for d in base.iterdir() if d.is_dir()}


def _remove_tree(top: Path) -> None:
    if not top.is_dir():
        return
    for directory in sorted(_dirs(top), key=lambda p: len(p.parts), reverse=True):
        for _ in range(50):
            group = Cgroup((directory,), False)
            group.kill_all()
            try:
                directory.rmdir()
                break
            except OSError:  # busy: a process was still exiting
                time.sleep(0.05)


def _dirs(top: Path) -> Iterator[Path]:
    yield top
    for entry in top.iterdir():
        if entry.is_dir():
            yield from _dirs(entry)


def why_not() -> str:
    """Why this process cannot give containers cgroup limits ("" if it can)."""
    if os.geteuid() != 0:
        return "not root: cannot create cgroups"
    own = _own_cgroups()
    if (ROOT / "cgroup.controllers").exists():
        parent = ROOT / own.get("", "/").lstrip("/")
        if "memory" not in _read(parent / "cgroup.controllers").split():
            return f"cgroup v2 without the memory controller delegated at {parent}"
        return "" if os.access(parent, os.W_OK) else f"{parent} is not writable"
    for controller in V1_CONTROLLERS:
        directory = ROOT / controller / own.get(controller, "/").lstrip("/")
        if not os.access(directory, os.W_OK):
            return f"no writable cgroup v1 {controller} controller at {directory}"
    return ""


def usable() -> bool:
    return not why_not()


def detect(node_name: str) -> Cgroups | None:
    """This node's cgroups, or None (and one log line saying why) where they cannot be used."""
    try:
        return _detect(node_name)
    except OSError as exc:
        log.warning("cgroups not usable (%s): containers run without resource limits", exc)
        return None


def _detect(node_name: str) -> Cgroups | None:
    reason = why_not()
    if reason:
        log.warning("cgroups not usable (%s): containers run without resource limits", reason)
        return None
    own = _own_cgroups()
    leaf = f"{LEAF_PREFIX}{os.getpid()}.{node_name}"
    if (ROOT / "cgroup.controllers").exists():  # v2: the unified hierarchy at the root
        parent = ROOT / own.get("", "/").lstrip("/")
        remove_stale(parent)
        base = parent / leaf
        base.mkdir(exist_ok=True)
        _write(base / "cgroup.subtree_control", "+memory +cpu")
        return Cgroups((base,), v2=True)
    parents = tuple(ROOT / c / own.get(c, "/").lstrip("/") for c in V1_CONTROLLERS)
    for parent in parents:
        remove_stale(parent)
    bases = tuple(parent / leaf for parent in parents)
    for base in bases:
        base.mkdir(exist_ok=True)
    return Cgroups(bases, v2=False)


def remove_stale(parent: Path, alive: Callable[[int], bool] | None = None) -> list[Path]:
    """Remove (killing what is in them) the node directories under `parent` whose owning node
    process no longer runs; the directories removed."""
    is_alive = alive or _pid_alive
    stale = []
    for entry in _children(parent):
        owner = _STALE_NAME.fullmatch(entry.name)
        if owner is not None and not is_alive(int(owner[1])):
            _remove_tree(entry)
            stale.append(entry)
    return stale


def _children(parent: Path) -> list[Path]:
    try:
        return [entry for entry in parent.iterdir() if entry.is_dir()]
    except OSError:
        return []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller ("" for v2)."""
    paths = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def delete_base(cgroups: Cgroups) -> None:
    """Remove the node's cgroup directories (at a clean stop, once its pods are gone)."""
    for base in cgroups.bases:
        _remove_tree(base)
