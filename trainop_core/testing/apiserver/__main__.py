"""``python -m trainop_core.testing.apiserver --port N --kubeconfig PATH [--kubelet auto|manual]``.

Serves until interrupted. ``--kubelet auto`` runs every pod for ``--run-seconds`` and exits 0;
``manual`` (the default) leaves pods Pending, as there is nothing to drive them from outside.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from ..kubelet import Kubelet, Rule
from .server import ApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainop_core.testing.apiserver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server here")
    parser.add_argument("--kubelet", choices=("auto", "manual"), default="manual")
    parser.add_argument("--run-seconds", type=float, default=1.0)
    parser.add_argument("--bookmark-interval", type=float, default=60.0)
    parser.add_argument("--history-size", type=int, default=50_000)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    server = ApiServer(
        args.host,
        args.port,
        history_size=args.history_size,
        bookmark_interval=args.bookmark_interval,
    ).start()
    rules = [Rule("*", run_seconds=args.run_seconds)] if args.kubelet == "auto" else []
    kubelet = Kubelet(server, rules).start()
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    print(f"serving on {server.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        kubelet.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
