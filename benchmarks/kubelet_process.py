"""The kubelet stand-in in a process of its own, so a benchmark can read its CPU time apart.

    PYTHONPATH=. python benchmarks/kubelet_process.py --kubeconfig KC [--namespace NS]
        [--run-seconds 1] [--workers 4] [--log TEXT]

Every pod runs `--run-seconds` and exits 0; each container's log is `--log` (a `\n` in it is a
newline), served through pods/log. Prints "ready" once the node is registered and the pod
list read; runs until SIGTERM or SIGINT, then prints the pod LISTs and WATCHes it made.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from trainop_core.testing.kubelet import Kubelet, Rule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="the API server's kubeconfig")
    parser.add_argument("--namespace", default="", help="only pods of this namespace (all)")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="each pod's run (1 s)")
    parser.add_argument("--workers", type=int, default=4, help="writer threads (4)")
    parser.add_argument("--log", default="", help="what every container prints when it starts")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    rules = [Rule("*", run_seconds=args.run_seconds, log=args.log.replace("\\n", "\n"))]
    with Kubelet(args.kubeconfig, rules, namespace=args.namespace, workers=args.workers) as kubelet:
        print("ready", flush=True)
        stop.wait()
        print(f"lists {kubelet.lists} watches {kubelet.watches}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
