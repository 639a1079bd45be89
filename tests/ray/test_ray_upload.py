"""Shipping a job's directory to the cluster, end to end through `trainop run - --backend ray`
(a job read from standard input: its directory is the current one). Regression tests for the
incident where that package was written into the directory it packed (Ray's upload helper
writes its zip into the current directory): once more than a write buffer had been packed
before the zip itself came up, the zip packed itself without end, until the disk was full.
Each run here has a file-size limit, so a regression fails fast instead of filling the disk."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from builders import make_job
from ray_helpers import leftovers, py, tagged

from trainop_core.client import is_succeeded

FILE_SIZE_LIMIT = 64 * 1024**2  # no file this process writes may grow larger
CHECK = py("""
    import os
    print(open("data.txt").read().strip(), "| venv shipped:", os.path.exists(".venv"))
""")


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def _run_from(cwd: Path, job: dict[str, Any], address: str, **env: str) -> Any:
    command = [sys.executable, "-m", "trainop_core.cli.main", "run", "-", "--rm"]
    command += ["--backend", "ray", "--ray-address", address]
    return subprocess.run(
        command, input=yaml.safe_dump(job), capture_output=True, text=True, cwd=cwd,
        env={**os.environ, **env}, preexec_fn=_limited, timeout=180,
    )  # fmt: skip


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (project / ".venv" / "lib" / "big.so").write_bytes(b"\0" * 2 * 1024**2)
    (project / "data.txt").write_text("shipped with the job\n")
    for i in range(64):  # more than a write buffer is packed before a package file in here
        (project / f"part-{i:02}.txt").write_bytes(b"x" * 16 * 1024)
    return project


def test_a_job_given_as_data_ships_the_current_directory_bounded_and_never_into_it(
    ray_cluster: Any, tag: str, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    before = sorted(p.name for p in project.iterdir())
    job = tagged(make_job("TFJob", "from-stdin").workers(1, command=CHECK), tag)
    done = _run_from(project, job, ray_cluster.address)
    assert done.returncode == 0, done.stderr
    assert "worker-0 | shipped with the job | venv shipped: False" in done.stdout
    assert sorted(p.name for p in project.iterdir()) == before  # no package written here
    assert not leftovers(tag)


def test_a_directory_over_the_upload_limit_is_refused_before_anything_is_created(
    ray_cluster: Any, tag: str, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    (project / "a-weights.bin").write_bytes(b"\1" * 3 * 1024**2)
    before = sorted(p.name for p in project.iterdir())
    job = tagged(make_job("TFJob", "too-big").workers(1, command=CHECK), tag)
    done = _run_from(project, job, ray_cluster.address, TRAINOP_RAY_UPLOAD_LIMIT="1Mi")
    assert done.returncode == 2, done.stderr
    assert f"cannot ship {project} to the Ray cluster" in done.stderr
    assert "upload limit of 1.0 MiB" in done.stderr
    assert "largest: a-weights.bin 3.0 MiB" in done.stderr
    assert "created" not in done.stderr
    assert sorted(p.name for p in project.iterdir()) == before
    assert not leftovers(tag)


def test_a_job_given_as_data_without_workdir_ships_nothing(
    upload_client: Any, tag: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """From Python, a job given as data names no directory: nothing of the current directory
    (here one holding a credentials file) reaches the cluster."""
    project = _project(tmp_path)
    (project / "credentials").write_text("secret\n")
    monkeypatch.chdir(project)
    look = py("import os; print('credentials shipped:', os.path.exists('credentials'))")
    job = tagged(make_job("TFJob", "as-data").workers(1, command=look), tag)
    upload_client.create(job)
    assert is_succeeded(upload_client.wait("as-data", timeout=120))
    lines = [line.text for line in upload_client.logs("as-data")]
    assert lines == ["credentials shipped: False"]


def test_a_symlink_leading_out_of_the_directory_is_refused_naming_it(
    ray_cluster: Any, tag: str, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    keys = tmp_path / "home" / ".ssh"
    keys.mkdir(parents=True)
    (keys / "id_ed25519").write_text("private key\n")
    os.symlink(keys, project / "ssh")
    job = tagged(make_job("TFJob", "linked").workers(1, command=CHECK), tag)
    done = _run_from(project, job, ray_cluster.address)
    assert done.returncode == 2, done.stderr
    assert f"ssh is a symbolic link to {keys}, outside the directory being shipped" in done.stderr
    assert "Nothing was uploaded" in done.stderr and "created" not in done.stderr
    assert not leftovers(tag)
