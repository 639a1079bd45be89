"""The names users import are listed once and stay importable; importing stays light."""

import subprocess
import sys

import trainop_core


def test_every_public_name_is_importable() -> None:
    missing = [name for name in trainop_core.__all__ if not hasattr(trainop_core, name)]
    assert missing == []


def test_the_public_api_lists_each_name_once() -> None:
    names = list(trainop_core.__all__)
    assert len(names) == len(set(names))


def test_importing_the_core_imports_no_optional_framework() -> None:
    code = (
        "import sys, trainop_core, trainop_core.client, trainop_core.planner, "
        "trainop_core.kinds.table, trainop_core.cli.main\n"
        "trainop_core.cli.main.build_parser()\n"
        "heavy = [m for m in ('flytekit', 'kfp', 'ray', 'kubernetes', 'torch', 'tensorflow') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
