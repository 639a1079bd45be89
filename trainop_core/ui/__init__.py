"""`trainop ui`: watch training in a browser, a page that reads through `TrainingClient`.

Needs the `ui` extra (Starlette, uvicorn); nothing in `trainop_core` imports this package but
the `trainop ui` command, so the rest of trainop never needs it. `serve` binds the address first
(port 0: any free port), prints the URL with its token, then serves until interrupted.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # Starlette is imported only when serving
    from trainop_core.ui.app import Settings

UI_MISSING = "trainop ui needs the ui extra: pip install 'trainop[ui]'"
DEFAULT_ADDRESS = "127.0.0.1:8686"


def missing_extra() -> bool:
    """Whether the ui extra's libraries are missing (imported here, only by `trainop ui`)."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return True
    return False


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) -> (host, port); ValueError saying what is wrong."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--address {address!r}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (OSError naming the address if it cannot be had)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def non_loopback_warning(host: str) -> str:
    return (
        f"WARNING: trainop ui serves on {host}, which is not a loopback address: anyone who can "
        "reach it and learns the token can read every job's logs and delete jobs, and the "
        "traffic (token included) is plain HTTP. Prefer 127.0.0.1 and an SSH tunnel."
    )


def serve(settings: Settings, sock: socket.socket, out: TextIO = sys.stdout) -> None:
    """Serve the page for `settings` on the bound `sock` until interrupted; prints the URL (with
    its token) first."""
    import uvicorn

    from trainop_core.ui.app import build_app
    from trainop_core.ui.security import Access, loopback_hosts, new_token

    host, port = sock.getsockname()[:2]
    hosts = loopback_hosts(host, port) if is_loopback(host) else frozenset()
    access = Access(new_token(), port, hosts)
    app = build_app(settings, access)
    print(f"trainop ui: http://{url_host(host)}:{port}/?token={access.token}", file=out, flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
    )
    uvicorn.Server(config).run(sockets=[sock])
