"""docs/upstream-differences.md kept true where a test can check it: the kinds `--enable-scheme`
accepts are the kind table's, and the upstream flags it calls not implemented are not flags."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from trainop_core.kinds.table import build_registry

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "upstream-differences.md").read_text()


def bullet(start: str) -> str:
    """The text of the bullet that begins with `start` (up to the next bullet or heading)."""
    found = re.search(re.escape(start) + r"(.*?)(?=\n- |\n#|\Z)", PAGE, re.S)
    assert found is not None, f"no bullet starting {start!r}"
    return found.group(1)


def operator_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "trainop_core", "operator", "--help"], cwd=ROOT,
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip


def test_the_kinds_enable_scheme_accepts_are_the_kind_tables() -> None:
    named = set(re.findall(r"`(\w+)`", bullet("- `--enable-scheme` accepts")))
    kinds = {kind.kind.lower() for kind in build_registry(entry_points=False)}
    assert kinds <= named, f"the page leaves out {sorted(kinds - named)}"
    assert "refused" not in bullet("- `--enable-scheme` accepts")  # every built-in kind is taken


def test_the_flags_called_not_implemented_are_not_flags() -> None:
    text = re.sub(r"\([^)]*\)", "", bullet("- Upstream flags not implemented:"))  # not asides
    missing = [f for f in re.findall(r"`(--[a-z-]+)`", text) if not f.startswith("--zap")]
    listed = operator_help()
    said = [f for f in missing if re.search(re.escape(f) + r"\b(?!-)", listed)]
    assert missing and said == [], f"the page says these are missing, but they exist: {said}"
