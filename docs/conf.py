"""Sphinx configuration of trainop's documentation site (docs/ is the source directory).

    python -m sphinx -W --keep-going -b html docs build/docs

builds it with warnings as errors, as tests/docs/test_site.py does in CI. Why Sphinx, MyST and
Furo, and how the pages are checked: docs/contributing.md.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The checkout's packages come first (the installed trainop may be another checkout's), then the
# site's own extensions.
for path in ("integrations/hpo", "integrations/kfp", "integrations/flyte", ""):
    sys.path.insert(0, str(ROOT / path))
sys.path.insert(0, str(DOCS / "_ext"))

project = "trainop"
author = "the trainop authors"
project_copyright = "the trainop authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "autodoc_trainop",  # docs/_ext: pydantic models and KFP components as autodoc shows them
    "cli_reference",  # docs/_ext: the CLI reference, from trainop's argparse parsers
    "program_help",  # docs/_ext: the --help of the other programs (python -m ...), run at build
]
root_doc = "index"
exclude_patterns = ["_build", "_ext", "diagrams"]
suppress_warnings: list[str] = []

# Every reference must resolve: a page link, a heading anchor, a documented Python object.
nitpicky = True
# Types of other projects stay plain text: their inventories would be fetched over the network
# (intersphinx), which CI does not have. Private types that public signatures name (type
# aliases, internal models) are not part of the API and stay plain text too.
nitpick_ignore_regex = [
    ("py:.*", r"(pathlib|collections|contextlib|datetime|typing|enum|annotated_types)\..*"),
    ("py:.*", r"(pydantic|flytekit|kfp|ray)\..*"),
    (
        "py:.*",
        r"(.*\.)?(Path|Source|KindLookup|JobT|TemplateSource|ClientFactory|JobTrialSpec|PodSettings"
        r"|ApiModel|LabelSelector|ObjectMeta|BuiltinDecorator|RuntimeCatalog|Dropped)",
    ),
]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# The docstrings write `name` for code, as Markdown does: show it as code, not as a citation.
default_role = "literal"

html_theme = "furo"
html_title = "trainop"
html_static_path: list[str] = []

# A repository file that an included page links to (examples/README.md links its own files) is
# named, not linked: the site holds pages, not the repository.
_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)#]+)\)")


def _name_repository_files(app: Any, relative_path: Path, parent: str, content: list[str]) -> None:
    folder = (DOCS / relative_path).parent.resolve().relative_to(ROOT)

    def named(match: re.Match[str]) -> str:
        target = (folder / match[2]).as_posix()
        label = match[1].strip("`")
        return f"`{target}`" if label in (match[2], target) else f"{match[1]} (`{target}`)"

    content[0] = _LINK.sub(named, content[0])


def setup(app: Any) -> None:
    app.connect("include-read", _name_repository_files)
