"""trainop_hpo's public names are listed once, all importable, and only `tune_job`'s need Ray."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trainop_hpo
from hpo_support import REPO

NEEDS_RAY = {"tune_job", "JobCleanupCallback", "TrialJobFailed"}


def test_the_public_api_lists_each_name_once_and_dir_shows_it() -> None:
    assert len(trainop_hpo.__all__) == len(set(trainop_hpo.__all__))
    assert dir(trainop_hpo) == trainop_hpo.__all__


def test_every_other_public_name_is_importable_without_ray() -> None:
    names = sorted(set(trainop_hpo.__all__) - NEEDS_RAY)
    code = f"import sys; sys.modules['ray'] = None\nfrom trainop_hpo import {', '.join(names)}\n"
    paths = os.pathsep.join([str(REPO), str(REPO / "integrations" / "hpo")])
    env = {**os.environ, "PYTHONPATH": paths}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", sorted(NEEDS_RAY))
def test_a_ray_name_is_importable_with_ray(name: str) -> None:
    pytest.importorskip("ray.tune")
    assert getattr(trainop_hpo, name) is not None


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'TuneJob'"):
        trainop_hpo.TuneJob  # noqa: B018  (the access is the test)
