"""Third-party kinds and pod decorators arrive through entry points of an installed distribution.

Each test installs a tiny distribution (a module plus its dist-info) on sys.path, as pip would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainop_core.decorators import build_pod_decorators
from trainop_core.kinds.table import build_registry

PLUGIN = """
import dataclasses
from trainop_core.kinds import jax

KIND = dataclasses.replace(jax.KIND, kind="LightGBMJob", plural="lightgbmjobs", aliases=())
NOT_A_KIND = "LightGBMJob"

def add_label(job, rtype, index, pod):
    pod["metadata"].setdefault("labels", {})["site"] = "lab-1"
"""


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, entry_points: str) -> None:
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    info = tmp_path / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_an_installed_kind_plugin_joins_the_registry_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, "site_lgbm", "[trainop.kinds]\nlgbm = site_lgbm:KIND\n")
    assert build_registry().get("lightgbmjob").plural == "lightgbmjobs"
    assert "LightGBMJob" not in build_registry(entry_points=False)


def test_an_entry_point_that_is_not_a_kind_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, "site_bad", "[trainop.kinds]\nbad = site_bad:NOT_A_KIND\n")
    with pytest.raises(TypeError, match="not a Kind"):
        build_registry()


def test_an_installed_pod_decorator_comes_before_the_extra_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        monkeypatch,
        "site_deco",
        "[trainop.pod_decorators]\nlabel = site_deco:add_label\n",
    )

    def extra(job: object, rtype: str, index: int, pod: dict[str, dict[str, str]]) -> None:
        return None

    found = build_pod_decorators(extra=[extra])
    assert [d.__name__ for d in found] == ["add_label", "extra"]  # type: ignore[attr-defined]  # functions
    assert build_pod_decorators(entry_points=False) == ()
