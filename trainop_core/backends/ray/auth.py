"""Ray's token authentication, as Ray's own tools handle it, for the addresses trainop is given.

Since Ray 2.59 a cluster started on this machine (`ray start --head`, or a local `ray.init()`)
uses token authentication once a token exists under the user's home (`~/.ray/auth_token`), and
Ray sends that token only to a cluster it finds by itself (no address, or "auto"). trainop also
sends it when the address it is given (`--ray-address`, `address=`, `$RAY_ADDRESS`) names that
same local cluster, the one `ray start` last started here: the README's commands then work as
written. Any other cluster's token is never guessed: a failed connection says in one line what
to set. `RAY_AUTH_MODE`, when set, always wins (Ray's own rule).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

MODE_ENV = "RAY_AUTH_MODE"
HINT = (
    "if the cluster uses token authentication, set RAY_AUTH_MODE=token and give its token "
    "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, or the file ~/.ray/auth_token)"
)


def use_local_token(address: str | None) -> None:
    """Turn token authentication on for this process (as Ray does for a cluster it finds
    itself) if `address` names the cluster `ray start` started on this machine, RAY_AUTH_MODE is
    unset and a token is there. Changes this process's environment; idempotent."""
    target = address if address not in (None, "auto") else os.environ.get("RAY_ADDRESS")
    if os.environ.get(MODE_ENV) is not None or not target or target in ("auto", "local"):
        return  # Ray's own rule applies (it finds the local cluster and its token itself)
    if target.startswith("ray://") or not _is_local_cluster(target):
        return
    try:  # Ray 2.59+: what Ray does for a local cluster it finds itself
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return  # an older Ray never turns token authentication on by itself
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def hint(error: BaseException) -> str:
    """What to set, appended to a connection error, when token authentication may be why."""
    if (os.environ.get(MODE_ENV) or "").lower() == "token":
        return ""
    text = str(error)
    return f"; {HINT}" if "InvalidAuthToken" in text or "Failed to connect" in text else ""


def _is_local_cluster(address: str) -> bool:
    """`address` (host:port) is the GCS of the cluster `ray start` last started on this machine
    (as recorded in Ray's temp directory), reached by its own address or a local one."""
    from ray._common.utils import get_ray_address_file

    try:
        current = Path(get_ray_address_file(None)).read_text().strip()
    except OSError:
        return False
    host, _, port = address.rpartition(":")
    current_host, _, current_port = current.rpartition(":")
    if not port or port != current_port:
        return False
    return host == current_host or host in _local_hosts()


def _local_hosts() -> set[str]:
    hosts = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    with contextlib.suppress(OSError):
        hosts.update(str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None))
    return hosts
