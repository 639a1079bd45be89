"""How soon the operator notices a dead connection to the API server: within 45 s.

client-go notices in about 45 s with its HTTP/2 health check (a ping after 30 s without a frame,
given up after 15 s more). The operator speaks HTTP/1.1 (`connection.py`), which has no ping, so
the bound comes from timeouts the operator sets itself; every figure is here, with its reason.

**Watches.** A dead watch and an idle healthy one look the same to the client: no bytes. Measured
on the kube-apiserver the tests run (v1.36, watch cache on, ``allowWatchBookmarks=true``), an idle
watch gets a BOOKMARK only once a minute, and none at all in a 10, 30 or 45 s watch on a resource
with no changes; what it always sends is the end of the stream at ``timeoutSeconds`` (10.01, 30.01,
45.01 s). So bookmarks cannot tell "idle" from "dead" within 45 s, but a short server-side timeout
can: the operator asks for ``timeoutSeconds`` drawn from [WATCH_TIMEOUT, 2 x WATCH_TIMEOUT) (the
jitter spreads the re-watches, as client-go's does) and gives up a watch that has sent nothing for
``timeoutSeconds`` + WATCH_READ_MARGIN: a healthy watch has ended by then, so a silent one is dead,
and the informer watches again from the newest resourceVersion it saw (no event is lost; 410 Gone
re-lists). The price is one watch request per informer every ~30 s instead of every 5-10 min:
with nine informers about 0.3 requests/s (measured: 31 watches in 120 s of an idle operator),
served from the API server's watch cache. An HTTP/2 connection with pings (issue 24's "one HTTP
layer" question) would allow 5-10 min watches again; until then these figures are the bound.

**Requests.** Every ordinary request gives up after REQUEST_READ_TIMEOUT without a byte.

**TCP keepalive** on every connection to the API server finds a peer that vanished (host down,
NAT state dropped) from the kernel's side within KEEPALIVE_IDLE + KEEPALIVE_COUNT x
KEEPALIVE_INTERVAL seconds (30 s), before the timeouts above; it cannot find a middlebox that
still acknowledges but no longer forwards, which is why the timeouts are the bound.

The flags ``--watch-timeout`` and ``--watch-read-timeout`` override the watch figures (tests use
a few seconds); :func:`dead_watch_bound` says what a choice guarantees.
"""

from __future__ import annotations

import contextlib
import socket

CONNECT_TIMEOUT = 10.0  # seconds to connect (and finish the TLS handshake)
REQUEST_READ_TIMEOUT = 30.0  # seconds an ordinary request waits for its next byte
WATCH_TIMEOUT = 20.0  # a watch's server-side timeoutSeconds is drawn from [20, 40)
WATCH_READ_MARGIN = 5.0  # ... and the client gives it up after timeoutSeconds + 5 s of silence
KEEPALIVE_IDLE = 15  # seconds of silence before the first keepalive probe
KEEPALIVE_INTERVAL = 5  # seconds between probes
KEEPALIVE_COUNT = 3  # unanswered probes before the kernel drops the connection
DEAD_CONNECTION_BOUND = 45.0  # what the figures above guarantee (client-go's health check)


def dead_watch_bound(watch_timeout: float, read_margin: float) -> float:
    """The longest a dead watch goes unnoticed: the longest server-side timeout drawn, plus the
    margin."""
    return 2 * watch_timeout + read_margin


def keep_alive(sock: socket.socket) -> None:
    """Turn TCP keepalive on for `sock` with the figures above (where the platform has them)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    options = (
        (getattr(socket, "TCP_KEEPIDLE", None), KEEPALIVE_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
    )
    for option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):  # a platform that refuses one keeps its default
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
