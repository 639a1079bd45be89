"""The names users import from trainop_kfp, listed once and all importable."""

from __future__ import annotations

import trainop_kfp


def test_every_public_name_resolves() -> None:
    assert trainop_kfp.__all__ == sorted(trainop_kfp.__all__)
    for name in trainop_kfp.__all__:
        assert getattr(trainop_kfp, name) is not None


def test_from_import_gives_the_function_not_a_submodule() -> None:
    from trainop_kfp import job_component, run_job

    assert callable(job_component) and job_component.__name__ == "job_component"
    assert callable(run_job) and run_job.__name__ == "run_job"
