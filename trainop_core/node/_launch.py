"""Runs in a container's first process, between the node's fork and the container's program.

``python -I -S _launch.py SPEC PARENT -- ARGV...``: standard library only, no import of trainop
(the node is multi-threaded, so no Python code of its own may run between fork and exec). It
asks to be SIGKILLed when the node dies, joins the container's cgroups, gives the container a
private mount namespace with its volumes bind-mounted at their mountPaths (a mountPath that does
not exist is made in that namespace only: see `_make_room`), then execs ARGV
(which may enter the pod's network namespace first, e.g. ``ip netns exec``)
(looked up on the container's PATH). SPEC is JSON: ``{"cgroups": [procs file, ...],
"mounts": [[source, target, read_only], ...]}``. Exits 127 (not found) or 126 (not executable)
when ARGV cannot be run, after saying why on stderr (the container's log).
"""

import ctypes
import json
import os
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18


def main(argv: list[str]) -> None:
    spec, parent, program = json.loads(argv[1]), int(argv[2]), argv[4:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the node died before prctl took effect
        os._exit(137)
    for procs in spec.get("cgroups") or []:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    if spec.get("mounts"):
        _mount(libc, spec["mounts"])
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"process node: cannot run {program[0]!r}: {exc}\n")
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _mount(libc: Any, mounts: list[list[Any]]) -> None:
    _check(libc.unshare(CLONE_NEWNS), "unshare")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    private: list[str] = []  # directories this namespace may add to: covered ones, volumes
    for source, target, read_only in mounts:
        if not os.path.exists(target):
            _make_room(libc, target, private)
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        elif not os.path.exists(target):
            os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
            open(target, "a").close()
        _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None), target)
        if read_only:
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC
            _check(libc.mount(None, target.encode(), None, flags, None), target)
        private.append(os.path.realpath(target))


def _make_room(libc: Any, target: str, private: list[str]) -> None:
    """Let `target`'s missing directories be made in this mount namespace only, never on the
    machine (a directory such as /var/run/secrets would make host programs think they run in a
    pod): cover its deepest existing directory with a tmpfs holding every entry it had (bound
    back from the original). Under "/" itself, or in what this namespace already owns, the
    directories are made where they are."""
    base = os.path.dirname(target.rstrip("/")) or "/"
    while not os.path.exists(base):
        base = os.path.dirname(base)
    base = os.path.realpath(base)
    if base == "/" or any(base == p or base.startswith(p + "/") for p in private):
        return
    original = os.open(base, os.O_PATH | os.O_DIRECTORY)  # the directory under the tmpfs
    entries = os.listdir(base)
    mode = f"mode={os.stat(base).st_mode & 0o7777:o}".encode()
    _check(libc.mount(b"tmpfs", base.encode(), b"tmpfs", 0, mode), f"tmpfs on {base}")
    for name in entries:
        source, place = f"/proc/self/fd/{original}/{name}", os.path.join(base, name)
        if os.path.islink(source):
            os.symlink(os.readlink(source), place)
            continue
        if os.path.isdir(source):
            os.mkdir(place)
        else:
            open(place, "a").close()
        _check(libc.mount(source.encode(), place.encode(), None, MS_BIND | MS_REC, None), place)
    private.append(base)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        sys.stderr.write(f"process node: mount {what}: {os.strerror(errno)}\n")
        os._exit(128)


if __name__ == "__main__":
    main(sys.argv)
