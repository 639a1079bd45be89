"""A tiny trial for hyperparameter search: `loss = (lr - 0.01)^2` once per step.

It prints Katib's StdOut metric format (`loss=... step=N`), which is all a trial runner reads, so
the best learning rate of any search is known in advance (0.01), and its progress as Kubeflow
Trainer names it (`progressPercentage=...`), which trainop shows (`trainop get`, Tune's results).
A negative --lr fails the job (exit 1), for trying failed trials. Only the standard library: it
runs in any Python image.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.1, help="seconds per step")
    args = parser.parse_args(argv)
    if args.lr < 0:
        print(f"error: --lr must not be negative, got {args.lr}", file=sys.stderr, flush=True)
        return 1
    for step in range(1, args.steps + 1):
        time.sleep(args.sleep)
        # The same loss every step keeps the ranking exact, whatever step a scheduler stops at;
        # a small per-step term that shrinks with the step makes the curve look like training.
        loss = (args.lr - 0.01) ** 2 + 1e-3 / step
        progress = 100 * step // args.steps
        print(f"loss={loss:.10g} progressPercentage={progress} step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
