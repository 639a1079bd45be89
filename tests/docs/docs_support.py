"""What the docs tests share: where the pages are, their shell blocks, the site's extensions."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGE_PATHS = [ROOT, *(ROOT / "integrations" / name for name in ("flyte", "kfp", "hpo"))]
# A page marks a shell block as one the tests run with MyST's code-block directive and the class
# `runnable` (docs/contributing.md says so):  ```{code-block} sh  /  :class: runnable
RUNNABLE = re.compile(r"^```\{code-block\} sh\n:class: runnable\n\n(.*?)^```", re.M | re.S)
PLAIN_SH = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def blocks(pattern: re.Pattern[str]) -> list[Block]:
    found = []
    for page in pages():
        text = page.read_text()
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page.name, line, match[1]))
    return found


def extension(name: str) -> ModuleType:
    """One of the site's own Sphinx extensions (docs/_ext)."""
    return script(DOCS / "_ext" / f"{name}.py")


def script(path: Path) -> ModuleType:
    """A Python file that is no package's module (a Sphinx extension, a drawing script), imported
    by its path under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"docs_script_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
