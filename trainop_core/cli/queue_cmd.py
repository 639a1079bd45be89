"""`trainop queue`: the local backend's queues (quotas, priority classes, what they hold)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainop_core.cli._output import EXIT_INVALID, EXIT_OK, report_error, table
from trainop_core.errors import TrainopError

# User-defined Kubernetes PriorityClasses hold at most this; larger values are the system's.
MAX_PRIORITY = 1_000_000_000
MIN_PRIORITY = -(2**31)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "queue",
        help="the local queues: quotas and priority classes",
        description=(
            "Jobs labelled kueue.x-k8s.io/queue-name: NAME (or submitted with --queue NAME) wait "
            "on this machine until queue NAME has room for their CPU and memory requests (a "
            "container without a CPU request counts as 1 CPU), highest priority class first, "
            "first come first served within a priority. A queue without a quota of its own gets "
            "this machine's CPUs and memory. State lives under $TRAINOP_HOME (default "
            "~/.trainop). Exit codes: 0 done, 2 invalid input."
        ),
    )
    sub = parser.add_subparsers(dest="queue_command", metavar="SUBCOMMAND", required=True)
    setter = sub.add_parser(
        "set",
        help="set a queue's quota",
        description="Set the quota of queue NAME; jobs that now fit are admitted at once.",
    )
    setter.add_argument("name", metavar="NAME", help="the queue (the label's value)")
    setter.add_argument("--cpu", metavar="QUANTITY", help="CPUs, e.g. 2 or 1500m")
    setter.add_argument("--memory", metavar="QUANTITY", help="memory, e.g. 4Gi")
    setter.set_defaults(func=run_set)
    lister = sub.add_parser(
        "list",
        help="list queues and priority classes",
        description=(
            "Each queue with its quota ('machine': this machine's, none set), what its admitted "
            "jobs use, and how many jobs it admitted and holds; then the priority classes."
        ),
    )
    lister.set_defaults(func=run_list)
    priority = sub.add_parser(
        "priority",
        help="define a priority class",
        description=(
            "Give priority class NAME (what spec.runPolicy.schedulingPolicy.priorityClass names) "
            "the value VALUE, as a Kubernetes PriorityClass does: higher runs first. Kubernetes' "
            "system-cluster-critical and system-node-critical are always known."
        ),
    )
    priority.add_argument("name", metavar="NAME", help="the class name")
    priority.add_argument("value", metavar="VALUE", help=f"an integer up to {MAX_PRIORITY}")
    priority.set_defaults(func=run_priority)
    reset = sub.add_parser(
        "reset",
        help="forget every quota and priority class (repairs a damaged queues.json)",
        description=(
            "Put $TRAINOP_HOME/queues.json aside as queues.json.bak, whatever it holds (the "
            "repair when it is damaged): every queue then gets this machine's quota and only "
            "Kubernetes' system priority classes are known. Queued jobs keep their priority."
        ),
    )
    reset.set_defaults(func=run_reset)


def run_set(args: argparse.Namespace) -> int:
    from trainop_core.backends.local.queue import admit, change_config
    from trainop_core.backends.local.queueing import Resources, is_queue_name, quantity
    from trainop_core.backends.local.spawn import spawn_supervisor
    from trainop_core.backends.local.state import StateRoot

    if not is_queue_name(args.name):
        return _invalid(f"{args.name[:70]!r} is not a queue name (lower-case letters, digits, '-')")
    if args.cpu is None and args.memory is None:
        return _invalid("give --cpu, --memory or both")
    try:
        cpu = quantity(args.cpu, "--cpu") if args.cpu is not None else None
        memory = quantity(args.memory, "--memory") if args.memory is not None else None
    except ValueError as err:
        return _invalid(str(err))
    root = StateRoot()

    def change(config: Any) -> None:
        current = config.quota(args.name)
        config.quotas[args.name] = Resources(
            current.cpu if cpu is None else cpu, current.memory if memory is None else memory
        )

    try:
        config = change_config(root, change)
        admit(root, spawn=spawn_supervisor)
    except (TrainopError, OSError) as err:
        return _failed(err)
    quota = config.quotas[args.name].to_dict()
    print(f"queue {args.name}: cpu {quota['cpu']}, memory {quota['memory']}")
    return EXIT_OK


def run_priority(args: argparse.Namespace) -> int:
    from trainop_core.backends.local.queue import change_config
    from trainop_core.backends.local.queueing import is_queue_name
    from trainop_core.backends.local.state import StateRoot

    if not is_queue_name(args.name):  # a PriorityClass is named like a DNS label too
        return _invalid(f"{args.name[:70]!r} is not a priority class name")
    text = args.value.strip()
    digits = text.lstrip("-")
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 10):
        return _invalid(f"VALUE: {text[:40]!r} is not an integer")
    value = int(text)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        return _invalid(f"VALUE: {value} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
    try:
        change_config(
            StateRoot(), lambda config: config.priority_classes.update({args.name: value})
        )
    except (TrainopError, OSError) as err:
        return _failed(err)
    print(f"priority class {args.name}: {value}")
    return EXIT_OK


def run_reset(args: argparse.Namespace) -> int:
    from trainop_core.backends.local.queue import admit, reset_config
    from trainop_core.backends.local.spawn import spawn_supervisor
    from trainop_core.backends.local.state import StateRoot

    root = StateRoot()
    try:
        kept = reset_config(root)
        if kept is not None:
            admit(root, spawn=spawn_supervisor)  # the machine's quota may admit jobs at once
    except (TrainopError, OSError) as err:
        return _failed(err)
    print("queues reset" + (f" (the old configuration is {kept})" if kept else ": nothing was set"))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    from trainop_core.backends.local.queue import load_config, summaries
    from trainop_core.backends.local.state import StateRoot

    root = StateRoot()
    try:
        found, classes = summaries(root), load_config(root).priority_classes
    except (TrainopError, OSError) as err:
        return _failed(err)
    rows = [["QUEUE", "CPU", "MEMORY", "USED CPU", "USED MEMORY", "ADMITTED", "WAITING"]]
    for queue in found:
        quota, used = queue.quota.to_dict(), queue.used.to_dict()
        source = "" if queue.configured else " (machine)"
        rows.append(
            [
                queue.name,
                quota["cpu"] + source,
                quota["memory"] + source,
                used["cpu"],
                used["memory"],
                str(queue.admitted),
                str(queue.waiting),
            ]
        )
    print(table(rows) if found else "No queues.")
    if classes:
        print()
        print(table([["PRIORITY CLASS", "VALUE"], *([k, str(v)] for k, v in classes.items())]))
    return EXIT_OK


def _invalid(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_INVALID


def _failed(err: TrainopError | OSError) -> int:
    if isinstance(err, TrainopError):
        return report_error(err)
    print(f"error: {err.strerror or err} ({err.filename})", file=sys.stderr)
    return EXIT_INVALID
