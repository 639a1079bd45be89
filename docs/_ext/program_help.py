"""The `--help` of trainop's other programs, run while the docs are built.

In a page, ```` ```{program-help} trainop_core.node ```` ```` renders what
``python -m trainop_core.node --help`` prints, run from this checkout in a terminal `WIDTH`
columns wide, so a page cannot drift from the program's argparse parser. A program whose `--help`
fails is a build error, and the build warns (an error under `-W`) about any program of `PROGRAMS`
that no page renders. tests/docs/test_site.py compares every rendered help with the real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_PATHS = [ROOT, *(ROOT / "integrations" / name for name in ("flyte", "kfp", "hpo"))]
WIDTH = 100
#: The modules run as programs (`python -m`) whose options the docs show; `trainop` itself is
#: cli_reference's, the operator's flags are documented with its deployment.
PROGRAMS = ("trainop_core.testing.cluster", "trainop_core.node", "trainop_core.testing.binaries")
logger = logging.getLogger(__name__)


def help_text(module: str) -> str:
    """What ``python -m MODULE --help`` prints in a terminal `WIDTH` columns wide.

    Raises RuntimeError with the program's stderr when it does not exit 0."""
    env = {
        **os.environ,
        "COLUMNS": str(WIDTH),
        "PYTHONPATH": os.pathsep.join(map(str, PACKAGE_PATHS)),
    }
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0 or not done.stdout.startswith("usage:"):
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


class ProgramHelp(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module = self.arguments[0]
        try:
            text = help_text(module)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raise self.error(f"`python -m {module} --help` failed: {exc}") from None
        _rendered(self.env).add(module)
        block = nodes.literal_block(text, text, language="none")
        block["classes"].append("program-help")
        return [block]


def _rendered(env: BuildEnvironment) -> set[str]:
    if not hasattr(env, "trainop_programs_rendered"):
        env.trainop_programs_rendered = set()  # type: ignore[attr-defined]
    found: set[str] = env.trainop_programs_rendered  # type: ignore[attr-defined]
    return found


def _merge(app: Sphinx, env: BuildEnvironment, docnames: Any, other: BuildEnvironment) -> None:
    _rendered(env).update(_rendered(other))


def _check(app: Sphinx, env: BuildEnvironment) -> None:
    for module in PROGRAMS:
        if module not in _rendered(env):
            logger.warning("no page renders `python -m %s --help`", module, type="trainop")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("program-help", ProgramHelp)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
