"""The CLI reference, generated from trainop's argparse parsers while the docs are built.

In a page, ```` ```{trainop-help} run ```` ```` renders what `trainop run --help` prints (words
after the directive name: the command path, none for `trainop` itself), at a fixed width of
`WIDTH` columns. The build warns (an error under `-W`) about any command of the parser tree
that no page renders, so a new command cannot be left out; tests/docs/test_site.py compares
every rendered help with the real `--help` output.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

WIDTH = 100
logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    from trainop_core.cli.main import build_parser as trainop_parser

    return trainop_parser()


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command path of the tree, parents first: (), ("run",), ("queue",), ("queue", "set")."""
    yield path
    for name, sub in _subparsers(parser).items():
        yield from commands(sub, (*path, name))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    # argparse shows its subcommands only through these private names (sphinx-argparse reads
    # them too); the tests fail if that ever changes.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def find(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> argparse.ArgumentParser:
    for word in path:
        subs = _subparsers(parser)
        if word not in subs:
            raise KeyError(" ".join(path))
        parser = subs[word]
    return parser


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps help at the terminal's width, which it reads from $COLUMNS."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def help_text(path: tuple[str, ...]) -> str:
    """What `trainop PATH... --help` prints in a terminal `WIDTH` columns wide."""
    with _columns(WIDTH):
        return find(build_parser(), path).format_help()


class TrainopHelp(SphinxDirective):
    optional_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        path = tuple(self.arguments[0].split()) if self.arguments else ()
        try:
            text = help_text(path)
        except KeyError:
            raise self.error(f"trainop has no command {' '.join(path)!r}") from None
        _rendered(self.env).add(path)
        block = nodes.literal_block(text, text, language="none")
        block["classes"].append("trainop-help")
        return [block]


def _rendered(env: BuildEnvironment) -> set[tuple[str, ...]]:
    if not hasattr(env, "trainop_cli_rendered"):
        env.trainop_cli_rendered = set()  # type: ignore[attr-defined]
    found: set[tuple[str, ...]] = env.trainop_cli_rendered  # type: ignore[attr-defined]
    return found


def _merge(app: Sphinx, env: BuildEnvironment, docnames: Any, other: BuildEnvironment) -> None:
    _rendered(env).update(_rendered(other))


def _check(app: Sphinx, env: BuildEnvironment) -> None:
    missing = [p for p in commands(build_parser()) if p not in _rendered(env)]
    for path in missing:
        logger.warning("no page renders the help of `trainop %s`", " ".join(path), type="trainop")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("trainop-help", TrainopHelp)
    app.connect("env-merge-info", _merge)
    app.connect("env-check-consistency", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
