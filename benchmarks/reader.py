"""How long trainop's bounded YAML reader takes, against PyYAML's own loaders, for real and
hostile job sources.

    PYTHONPATH=. python benchmarks/reader.py [--runs 5]

trainop reads every job source with PyYAML's pure-Python scanner and parser and composes the
nodes itself (`trainop_core/api/reader.py`), so that its limits (size, values, nesting) are the
ones a user meets whatever PyYAML and libyaml the machine has. This prints what that costs: the
median wall time of `--runs` reads of each source with trainop's reader, with PyYAML's
pure-Python `SafeLoader` and with libyaml's `CSafeLoader` (when PyYAML has it; neither of those
two is bounded), and the peak memory of trainop's read under tracemalloc. A refused source shows
its time to the refusal.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import yaml

from trainop_core.api.reader import MAX_DEPTH, parse_yaml
from trainop_core.errors import InvalidJobError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def big_job(env_vars: int) -> str:
    """A PyTorchJob whose worker has `env_vars` environment variables (about 60 bytes each)."""
    env = "".join(
        f"              - name: VAR_{i}\n                value: 'value number {i}'\n"
        for i in range(env_vars)
    )
    return (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: big}\nspec:\n"
        "  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n"
        "        spec:\n          containers:\n            - name: pytorch\n"
        "              image: python:3.11\n              command: [python, train.py]\n"
        f"              env:\n{env}"
    )


def sources() -> dict[str, str]:
    return {
        "examples/pytorch/ddp.yaml": (EXAMPLES / "pytorch" / "ddp.yaml").read_text(),
        "a job with 1,000 env vars (64 KiB)": big_job(1_000),
        "a job with 15,000 env vars (1 MiB)": big_job(15_000),
        "a job with 40,000 env vars (2.8 MiB)": big_job(40_000),
        "100,000 '[' (refused)": "[" * 100_000,
        f"{MAX_DEPTH + 1} levels of block mappings (refused)": "".join(
            " " * i + "a:\n" for i in range(MAX_DEPTH + 1)
        ),
    }


def trainop_read(text: str) -> None:
    with contextlib.suppress(InvalidJobError):
        parse_yaml(text, "bench")


def library_read(loader: type) -> Callable[[str], None]:
    def read(text: str) -> None:
        with contextlib.suppress(yaml.YAMLError, RecursionError):
            list(yaml.load_all(text, Loader=loader))

    return read


def median_seconds(read: Callable[[str], None], text: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        read(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_mib(read: Callable[[str], None], text: str) -> float:
    tracemalloc.start()
    try:
        read(text)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="reads per source (median)")
    args = parser.parse_args()
    readers: dict[str, Callable[[str], None]] = {
        "trainop": trainop_read,
        "SafeLoader": library_read(yaml.SafeLoader),
    }
    if hasattr(yaml, "CSafeLoader"):
        readers["CSafeLoader"] = library_read(yaml.CSafeLoader)
    print(f"PyYAML {yaml.__version__}; median of {args.runs} runs, milliseconds")
    header = ["source", *readers, "trainop peak MiB"]
    print(" | ".join(header))
    for name, text in sources().items():
        # A refused source goes to trainop only: libyaml's composer recurses in C and may take
        # the interpreter down on deep input.
        chosen = [trainop_read] if "refused" in name else list(readers.values())
        times = [f"{median_seconds(read, text, args.runs) * 1000:.1f}" for read in chosen]
        times += ["-"] * (len(readers) - len(chosen))
        cells = [name, *times, f"{peak_mib(trainop_read, text):.1f}"]
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
