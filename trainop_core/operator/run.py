"""Command-line entry: parse upstream's flags, build the Manager, run it until a signal.

Exit codes: 0 clean shutdown, 1 startup failure or lost leadership, 2 invalid flags.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from trainop_core.decorators.config import load_decorator_config
from trainop_core.errors import InvalidJobError
from trainop_core.kinds.table import build_registry
from trainop_core.operator.options import add_flags, options_from_args
from trainop_core.runtimes.kind import split_schemes

log = logging.getLogger("trainop_core.operator")


def run_from_args(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=str(args.log_level).upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        options = options_from_args(args)
        v1_schemes, _ = split_schemes(options.enable_schemes)
        registry = build_registry().select(v1_schemes)  # unknown names are refused here
        decorators = load_decorator_config(options.decorators or None)
    except ValueError as exc:
        print(f"trainop operator: {exc}", file=sys.stderr)
        return 2
    except InvalidJobError as exc:  # the decorator configuration, every problem
        print(f"trainop operator: --decorators: {exc}", file=sys.stderr)
        return 2
    from trainop_core.operator.manager import Manager  # the informers etc.: only when running

    try:
        manager = Manager(options, registry, decorators=decorators)
    except Exception as exc:  # e.g. no kubeconfig: report, don't trace
        print(f"trainop operator: cannot start: {exc}", file=sys.stderr)
        return 1
    _on_signals(manager.shutdown)
    _freeze_startup_objects()
    return manager.run()


def _freeze_startup_objects() -> None:
    """Collect once, then keep every object alive now (modules, classes, the models' validators)
    out of the cycle collector's scans for good (`gc.freeze`, as long-running CPython servers
    do): they live as long as the process, and a full collection scanned them each time, a pause
    of 60-90 ms in the middle of reconciles. Only in the process's own operator (main thread),
    not when a test runs the operator in a thread of its process."""
    if threading.current_thread() is threading.main_thread():
        gc.collect()
        gc.freeze()


def _on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM (kubelet) and SIGINT (Ctrl-C) stop the manager cleanly."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainop_core.operator", description="The trainop Kubernetes operator."
    )
    add_flags(parser)
    return run_from_args(parser.parse_args(argv))
