"""The documentation site builds with warnings as errors (no broken page link or anchor, no
unresolved Python reference, no page outside the navigation), its CLI reference is what every
`--help` prints, and its API reference documents every public name."""

from __future__ import annotations

import contextlib
import html
import importlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import DOCS, PACKAGE_PATHS, ROOT, extension, pages

from trainop_core.cli.main import main

CLI = extension("cli_reference")
PROGRAMS = extension("program_help")
PUBLIC_PACKAGES = ("trainop_core", "trainop_flyte", "trainop_kfp", "trainop_hpo")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from scratch (-E) as CI builds it: `-W --keep-going`."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, PACKAGE_PATHS))}
    command = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html"]
    built = subprocess.run(
        [*command, str(DOCS), str(out)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_every_page_with_warnings_as_errors(site: Path) -> None:
    built = {path.stem for path in site.glob("*.html")}
    assert {page.stem for page in pages()} <= built


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """-W really is strict: a link to a page that does not exist is an error."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text('extensions = ["myst_parser"]\nnitpicky = True\n')
    (source / "index.md").write_text("# A page\n\n[gone](missing.md)\n")
    command = [sys.executable, "-m", "sphinx", "-E", "-W", "-q", "-b", "html"]
    built = subprocess.run([*command, str(source), str(tmp_path / "out")], capture_output=True)
    assert built.returncode != 0
    assert b"missing" in built.stderr


def _reference_blocks(site: Path) -> list[str]:
    page = (site / "cli.html").read_text()
    blocks = re.findall(r'<div class="trainop-help[^"]*".*?<pre>(.*?)</pre>', page, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks]


def _help(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    """What `trainop PATH... --help` prints in a terminal as wide as the reference's."""
    monkeypatch.setenv("COLUMNS", str(CLI.WIDTH))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize(
    "path",
    list(CLI.commands(CLI.build_parser())),
    ids=lambda path: "trainop " + " ".join(path) if path else "trainop",
)
def test_the_cli_reference_shows_what_help_prints(
    site: Path, path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _help(path, monkeypatch) in _reference_blocks(site)


def test_the_cli_reference_has_one_block_per_command(site: Path) -> None:
    assert len(_reference_blocks(site)) == len(list(CLI.commands(CLI.build_parser())))


def _program_blocks(site: Path) -> list[str]:
    blocks = []
    for page in site.glob("*.html"):
        found = re.findall(
            r'<div class="program-help[^"]*".*?<pre>(.*?)</pre>', page.read_text(), re.S
        )
        blocks += [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in found]
    return blocks


@pytest.mark.parametrize("module", PROGRAMS.PROGRAMS)
def test_each_programs_help_in_the_docs_is_what_it_prints(site: Path, module: str) -> None:
    env = {**os.environ, "COLUMNS": str(PROGRAMS.WIDTH)}
    env["PYTHONPATH"] = os.pathsep.join(map(str, PACKAGE_PATHS))
    printed = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert printed.returncode == 0 and printed.stdout.startswith(f"usage: python -m {module}")
    assert printed.stdout in _program_blocks(site)


def test_the_programs_that_have_a_help_are_the_ones_the_docs_render() -> None:
    """Every `python -m` entry point of trainop_core with an argparse parser, but the CLI's and
    the operator's (documented elsewhere), is in the extension's list."""
    parsers = set()
    for path in (ROOT / "trainop_core").rglob("*.py"):
        text = path.read_text()
        if "argparse.ArgumentParser(" in text and 'if __name__ == "__main__"' in text:
            module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
            parsers.add(module.removesuffix(".__main__"))
    assert parsers - {"trainop_core.cli.main", "trainop_core.operator"} == set(PROGRAMS.PROGRAMS)


def test_a_program_whose_help_fails_fails_the_build(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    conf = f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\n"
    conf += 'extensions = ["myst_parser", "program_help"]\n'
    (source / "conf.py").write_text(conf)
    (source / "index.md").write_text(
        "# A page\n\n```{program-help} trainop_core.no_such_module\n```\n"
    )
    command = [sys.executable, "-m", "sphinx", "-E", "-W", "-q", "-b", "html"]
    built = subprocess.run(
        [*command, str(source), str(tmp_path / "out")], capture_output=True, text=True
    )
    assert built.returncode != 0
    assert "python -m trainop_core.no_such_module --help` failed" in built.stderr


def _documented(site: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with (site / "objects.inv").open("rb") as stream:
        inventory = InventoryFile.load(stream, "", os.path.join)
    return {name for role, names in inventory.items() if role.startswith("py:") for name in names}


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_the_api_reference_documents_every_public_name(site: Path, package: str) -> None:
    module = importlib.import_module(package)
    documented = _documented(site)
    missing = []
    for name in module.__all__:
        if name == "__version__":
            continue
        value = getattr(module, name)
        canonical = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        if f"{package}.{name}" not in documented and canonical not in documented:
            missing.append(name)
    assert missing == []
