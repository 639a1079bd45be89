"""Container logs where a kubelet keeps them, in the CRI logging format.

``<root>/<namespace>_<pod>_<uid>/<container>/<restartCount>.log``, written by
:class:`~trainop_core.node.crilog.CriLogWriter` (one record per line of output, as a container
runtime writes them) and served to `kubectl logs` by the kubelet endpoint. One pump thread per
container copies its stdout and stderr pipes into its file.
"""

from __future__ import annotations

import os
import selectors
import threading
from pathlib import Path
from typing import IO

from trainop_core.node.crilog import CriLogWriter

CHUNK = 65536


def pod_log_dir(root: Path, namespace: str, name: str, uid: str) -> Path:
    """Where a pod's container logs live."""
    return root / f"{namespace}_{name}_{uid}"


def log_file(pod_dir: Path, container: str, restart: int) -> Path:
    """The log of one run (restartCount `restart`) of `container`."""
    return pod_dir / container / f"{restart}.log"


def pump(out: IO[bytes], err: IO[bytes], path: Path) -> threading.Thread:
    """Copy the two pipes into `path` until both end, then close the log; the thread doing it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = CriLogWriter(path)
    thread = threading.Thread(target=_pump, args=(out, err, writer), daemon=True, name="logs")
    thread.start()
    return thread


def _pump(out: IO[bytes], err: IO[bytes], writer: CriLogWriter) -> None:
    names = {out.fileno(): "stdout", err.fileno(): "stderr"}
    with selectors.DefaultSelector() as selector, writer:
        for pipe in (out, err):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                data = os.read(key.fd, CHUNK)
                if data:
                    writer.write(names[key.fd], data)
                    continue
                selector.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]  # our own pipe objects
