"""The MXNet example's own virtualenv, for the tests that run real MXNet (marker `mxnet`).

`examples/mxnet/setup_venv.sh` builds it once (idempotent: later calls only check it). When it
cannot be built, a test that needs it fails under CI (`CI` set in the environment): CI must not
go green without them. Elsewhere it is skipped, saying why.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

MXNET = Path(__file__).resolve().parents[1] / "examples" / "mxnet"
SETUP = MXNET / "setup_venv.sh"
BUILD_TIMEOUT_S = 900


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def mxnet_python() -> Path:
    """The venv's interpreter (with mxnet importable); fails in CI, else skips, if unbuildable."""
    built, why = _build()
    if built is None:
        message = f"the MXNet venv could not be built by {SETUP}: {why}"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return built


@functools.cache
def _build() -> tuple[Path | None, str]:
    try:
        done = subprocess.run(
            ["bash", str(SETUP)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, str(err)
    if done.returncode != 0:
        return None, done.stderr.strip()[-500:]
    return Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python", ""
