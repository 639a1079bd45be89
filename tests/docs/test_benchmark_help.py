"""Every benchmark script that is meant to be run (it has a ``__main__`` block) answers ``--help``
with its usage and a description of each of its options, as the CLI's commands do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import PACKAGE_PATHS, ROOT

BENCHMARKS = ROOT / "benchmarks"
RUNNABLE = sorted(
    path for path in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in path.read_text()
)
# An argparse help entry: "  -x, --long VALUE   what it does" (the text may start on the next line).
ENTRY = re.compile(r"^  (?P<invocation>\S.*?)(?: {2,}(?P<help>\S.*))?$")


def undescribed(help_text: str) -> list[str]:
    """The options and arguments of an argparse `--help` that have no help text."""
    lines = help_text.splitlines()
    missing = []
    for index, line in enumerate(lines):
        match = ENTRY.match(line)
        if not match or match["help"]:
            continue
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if not re.match(r"^ {4,}\S", following):  # the help goes on the next line, indented
            missing.append(match["invocation"])
    return missing


def test_the_check_finds_an_option_without_help() -> None:
    described = (
        "options:\n  -h, --help  show this\n  --rounds ROUNDS\n  --jobs JOBS\n      how many"
    )
    assert undescribed(described) == ["--rounds ROUNDS"]


def test_the_runnable_scripts_are_found() -> None:
    names = {path.name for path in RUNNABLE}
    assert {"audit_timeline.py", "kueue_latency.py", "plot.py"} <= names
    assert "harness.py" not in names  # a library of the scripts, not run on its own


@pytest.mark.parametrize("script", RUNNABLE, ids=lambda path: path.name)
def test_a_benchmark_script_describes_its_options(script: Path) -> None:
    env = {
        **os.environ,
        # tests/ for decorator_calls.py's test servers, as its docstring runs it
        "PYTHONPATH": os.pathsep.join(map(str, [*PACKAGE_PATHS, ROOT / "tests"])),
        "COLUMNS": "100",
    }
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
    options = done.stdout.split("options:", 1)[-1]
    assert re.search(r"^  --(?!help\b)", options, re.M), "no option besides --help"
    assert undescribed(done.stdout) == []
