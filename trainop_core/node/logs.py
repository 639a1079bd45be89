"""Container logs where a kubelet keeps them, in the CRI logging format.

``<root>/<namespace>_<pod>_<uid>/<container>/<restartCount>.log``, one line per chunk of output:
``<RFC 3339 nanosecond time> <stdout|stderr> <F|P> <text>`` (P: a partial line continued by the
next entry), as a container runtime writes it and `kubectl logs` is served from. One pump
thread per container copies its stdout and stderr pipes into its file.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from pathlib import Path
from typing import IO

CHUNK = 16384


def pod_log_dir(root: Path, namespace: str, name: str, uid: str) -> Path:
    """Where a pod's container logs live."""
    return root / f"{namespace}_{name}_{uid}"


def log_file(pod_dir: Path, container: str, restart: int) -> Path:
    """The log of one run (restartCount `restart`) of `container`."""
    return pod_dir / container / f"{restart}.log"


def timestamp(when: float | None = None) -> str:
    """RFC 3339 with nanoseconds, always nine digits, UTC."""
    when = time.time() if when is None else when
    whole = int(when)
    nanos = min(999_999_999, round((when - whole) * 1e9))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{nanos:09d}Z"


def cri_lines(stream: str, data: bytes, pending: bytes) -> tuple[bytes, bytes]:
    """The CRI entries for `data` after the unfinished line `pending`; returns (entries, the
    new unfinished line). A line is written once complete or once longer than CHUNK."""
    buffered = pending + data
    lines = buffered.split(b"\n")
    rest = lines.pop()
    stamp = timestamp().encode()
    out = b"".join(b"%s %s F %s\n" % (stamp, stream.encode(), line) for line in lines)
    while len(rest) > CHUNK:
        out += b"%s %s P %s\n" % (stamp, stream.encode(), rest[:CHUNK])
        rest = rest[CHUNK:]
    return out, rest


def pump(out: IO[bytes], err: IO[bytes], path: Path) -> threading.Thread:
    """Copy the two pipes into `path` (CRI format) until both end; the thread doing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    thread = threading.Thread(target=_pump, args=(out, err, path), daemon=True, name="logs")
    thread.start()
    return thread


def _pump(out: IO[bytes], err: IO[bytes], path: Path) -> None:
    names = {out.fileno(): "stdout", err.fileno(): "stderr"}
    pending = {"stdout": b"", "stderr": b""}
    with selectors.DefaultSelector() as selector, open(path, "ab") as log:
        for pipe in (out, err):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                data = os.read(key.fd, CHUNK)
                stream = names[key.fd]
                if not data:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()  # type: ignore[union-attr]  # our own pipe objects
                    if pending[stream]:
                        log.write(cri_lines(stream, b"\n", pending[stream])[0])
                    continue
                entries, pending[stream] = cri_lines(stream, data, pending[stream])
                log.write(entries)
                log.flush()
