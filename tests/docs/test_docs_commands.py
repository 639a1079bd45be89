"""The docs' commands work as written: every shell block a page marks runnable is run, as a user
would type it, from the repository root in a private TRAINOP_HOME; every other shell block names
only repository files that exist (as tests/test_readme.py checks the README's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import PACKAGE_PATHS, PLAIN_SH, ROOT, RUNNABLE, Block, blocks
from test_readme import REPO_PATH

RUNNABLE_BLOCKS = blocks(RUNNABLE)


def _shim(folder: Path) -> Path:
    """`trainop` on PATH as this checkout's CLI (the installed one may be another checkout's)."""
    folder.mkdir()
    script = folder / "trainop"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainop_core.cli.main "$@"\n')
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=lambda block: block.id)
def test_a_runnable_block_runs(block: Block, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TRAINOP_HOME": str(tmp_path / "home"),
        "PATH": f"{_shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(map(str, PACKAGE_PATHS)),
    }
    env.pop("TRAINOP_DECORATORS", None)
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.returncode == 0, f"{block.id}:\n{block.text}\n{output}"


def test_the_docs_mark_blocks_runnable() -> None:
    pages = {block.page for block in RUNNABLE_BLOCKS}
    assert {"getting-started.md", "local.md", "local-queue.md"} <= pages


@pytest.mark.parametrize("block", blocks(PLAIN_SH), ids=lambda block: block.id)
def test_every_repository_path_a_shell_block_names_exists(block: Block) -> None:
    named = REPO_PATH.findall(block.text)
    missing = sorted(path for path in named if not list(ROOT.glob(path.rstrip(".,"))))
    assert missing == []
