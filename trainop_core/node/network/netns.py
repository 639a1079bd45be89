"""Network namespaces, veths and a bridge through iproute2, and sockets opened inside a namespace.

Everything this package creates on the host is named ``trainop-net-<pid>-<k>-...`` (network
namespaces under ``/run/netns``, their ``/etc/netns/<name>`` files, UTS namespaces under
``/run/trainop-net/<pid>-<k>/``), so a later start finds what a crashed owner left behind: an
owner whose pid no longer runs is stale, and :func:`remove_stale` deletes its namespaces (their
veths and bridge go with them). Nothing is created in the host's own network namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from trainop_core.node.network.errors import NetworkError, NetworkUnavailable

PREFIX = "trainop-net-"
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
STATE_DIR = Path("/run/trainop-net")
TOOLS = ("ip", "nsenter", "unshare", "umount")
_OWNER = re.compile(rf"^{PREFIX}(\d+)-(\d+)(?:-|$)")
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def preflight(
    euid: Callable[[], int] = os.geteuid, which: Callable[[str], str | None] = shutil.which
) -> None:
    """Raise NetworkUnavailable naming why pods cannot have network namespaces here."""
    if euid() != 0:
        raise NetworkUnavailable(
            "per-pod network namespaces need root (creating network namespaces, veth pairs and a "
            f"bridge needs CAP_NET_ADMIN and CAP_SYS_ADMIN); this process runs as uid {euid()}"
        )
    missing = [tool for tool in TOOLS if which(tool) is None]
    if missing:
        raise NetworkUnavailable(
            f"per-pod networking needs {', '.join(missing)} on PATH (iproute2, util-linux)"
        )


def ip(*args: str, netns: str = "", batch: Sequence[str] = ()) -> str:
    """Run one `ip` command (in `netns` when given), or a batch of them with `-batch -`."""
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    if not batch:
        return run(argv)
    try:
        return run([*argv, "-batch", "-"], "\n".join(batch) + "\n")
    except NetworkError as exc:  # ip names only the failing line's number: quote the commands
        raise NetworkError(f"{exc} (commands: {'; '.join(batch)})") from None


def run(argv: list[str], stdin: str | None = None) -> str:
    """Run a tool; its output, or NetworkError quoting what it said."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise NetworkError(f"{' '.join(argv[:6])} failed ({done.returncode}): {said}")
    return done.stdout


def add_netns(name: str) -> None:
    ip("netns", "add", name)


def delete_netns(name: str) -> None:
    """Delete a namespace (idempotent) and its /etc/netns files; its veths go with it."""
    with contextlib.suppress(NetworkError):
        ip("netns", "delete", name)
    shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


def write_etc(name: str, files: dict[str, str]) -> None:
    """Files `ip netns exec` bind-mounts over /etc/<file> for processes in namespace `name`."""
    folder = ETC_NETNS / name
    folder.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (folder / file).write_text(text)


def new_uts(path: Path, hostname: str) -> None:
    """A UTS namespace with `hostname`, kept alive by a bind mount at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    run(["unshare", f"--uts={path}", "hostname", hostname])


def drop_uts(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
    path.unlink(missing_ok=True)


def netns_names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def remove_stale(alive: Callable[[int], bool] | None = None) -> list[str]:
    """Delete what owners that no longer run left behind; the namespaces removed."""
    is_alive = alive or _pid_alive
    stale = [n for n in netns_names() if (m := _OWNER.match(n)) and not is_alive(int(m[1]))]
    for name in stale:
        delete_netns(name)
    for folder in _children(STATE_DIR) + _children(ETC_NETNS):
        m = _OWNER.match(PREFIX + folder.name) or _OWNER.match(folder.name)
        if m and not is_alive(int(m[1])):
            remove_state(folder)
    return stale


def remove_state(folder: Path) -> None:
    """Unmount the UTS namespaces in `folder` and remove it."""
    for file in _children(folder):
        drop_uts(file) if file.is_file() else shutil.rmtree(file, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []


def _pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block with this thread in network namespace `name`: sockets made inside stay
    there for good. Only the calling thread moves (setns(2) on a thread)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def _setns(fd: int) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NetworkError(f"setns: {os.strerror(errno)}")


def connect_in(name: str, host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to `host`:`port` from network namespace `name` (the socket is made
    there; the name is resolved here). Blocks at most `timeout` seconds; raises OSError."""
    address = socket.gethostbyname(host)
    with entered(name):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
    except BaseException:
        sock.close()
        raise
    return sock
