"""HPO tests: trials are real jobs on the local backend in a private TRAINOP_HOME, and the Ray
tests run a real local Ray (2 CPUs, no dashboard) whose temp directory is removed afterwards."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HPO_SRC = REPO / "integrations" / "hpo"

for _path in (REPO, HPO_SRC):  # an editable install makes this a no-op
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from trainop_core.backends.local import LocalBackend  # noqa: E402  (needs the paths above)
from trainop_core.client import TrainingClient  # noqa: E402


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "trainop-home"


@pytest.fixture
def client(home: Path) -> Iterator[TrainingClient]:
    client = TrainingClient(LocalBackend(home=home))
    yield client
    for job in client.list():
        client.delete(job.name, job.namespace)


@pytest.fixture(scope="module")
def ray_home() -> Iterator[Path]:
    """TRAINOP_HOME of the Ray tests' jobs."""
    path = Path(tempfile.mkdtemp(prefix="trainop-hpo-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def local_ray(ray_home: Path) -> Iterator[None]:
    """A real local Ray on 2 CPUs for one test module; Ray's temp directory is removed after.

    TRAINOP_HOME is set only once Ray runs: `tune_job` passes the driver's to its trials."""
    ray = pytest.importorskip("ray")
    saved = {name: os.environ.get(name) for name in ("TRAINOP_HOME", "PYTHONPATH")}
    paths = [str(REPO), str(HPO_SRC), *filter(None, [saved["PYTHONPATH"]])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False)
    os.environ["TRAINOP_HOME"] = str(ray_home)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
