"""trainop's operator under tracemalloc: ``python benchmarks/traced_operator.py <operator flags>``.

Runs ``python -m trainop_core.operator`` with tracemalloc on (``TRACE_FRAMES`` frames per
allocation, default 8). On SIGUSR1 it writes a snapshot to ``$TRACE_DIR/snapshot-<n>.pickle`` and
then ``snapshot-<n>.done`` holding its traced memory (current, peak) as JSON, so a driver
(benchmarks/operator_memory.py) can tell what grows between two points of a run.
"""

from __future__ import annotations

import itertools
import json
import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

COUNTER = itertools.count()


def dump(signum: int, frame: FrameType | None) -> None:
    directory = Path(os.environ["TRACE_DIR"])
    n = next(COUNTER)
    tracemalloc.take_snapshot().dump(str(directory / f"snapshot-{n}.pickle"))
    current, peak = tracemalloc.get_traced_memory()
    (directory / f"snapshot-{n}.done").write_text(json.dumps({"current": current, "peak": peak}))


def main() -> None:
    tracemalloc.start(int(os.environ.get("TRACE_FRAMES", "8")))
    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["trainop_core.operator", *sys.argv[1:]]
    runpy.run_module("trainop_core.operator", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
