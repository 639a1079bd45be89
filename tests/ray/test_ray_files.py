"""Shipping a job's directory (`backends/ray/files.py`), without a cluster: what is left out, the
limits (refused before anything is packaged), and a package that never lands on disk."""

from __future__ import annotations

import io
import os
import threading
import zipfile
from pathlib import Path

import pytest

from trainop_core.backends.ray.files import (
    FILES_ENV,
    LIMIT_ENV,
    UploadLimits,
    UploadRefused,
    package,
    unshipped_commands,
    walk,
)

BIG = UploadLimits(10 * 1024**2, 1000)


def write(root: Path, rel: str, data: bytes | str = b"x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def shipped(root: Path, limits: UploadLimits = BIG, excludes: tuple[str, ...] = ()) -> set[str]:
    return {e.name for e in walk(root, limits, excludes).entries if e.path is not None}


LEFT_OUT = {
    "a .git directory": ".git/objects/ab",
    "a .venv": ".venv/lib/site.py",
    "a virtualenv of any name (it holds pyvenv.cfg)": "myenv/pyvenv.cfg",
    "a conda environment (it holds conda-meta)": "envs/py/conda-meta/history",
    "__pycache__": "pkg/__pycache__/m.cpython-311.pyc",
    "a tool cache": ".mypy_cache/3.11/x.json",
}


@pytest.mark.parametrize("rel", LEFT_OUT.values(), ids=[f"{k} is left out" for k in LEFT_OUT])
def test_never_shipped(tmp_path: Path, rel: str) -> None:
    write(tmp_path, "train.py")
    write(tmp_path, rel)
    assert shipped(tmp_path) == {"train.py"}


def test_ignore_files_apply_to_their_own_directory_and_below(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*.log\n/data/\n")
    write(tmp_path, "run.log")
    write(tmp_path, "data/big.bin")
    write(tmp_path, "sub/data/kept.txt")  # "/data/" is anchored at the top
    write(tmp_path, "sub/.rayignore", "secret.txt\n")
    write(tmp_path, "sub/secret.txt")
    write(tmp_path, "secret.txt")  # the .rayignore in sub/ does not reach up
    write(tmp_path, "sub/deeper/x.log")
    assert shipped(tmp_path) == {
        ".gitignore",
        "secret.txt",
        "sub/.rayignore",
        "sub/data/kept.txt",
    }


def test_the_jobs_own_excludes_and_empty_directories(tmp_path: Path) -> None:
    write(tmp_path, "train.py")
    write(tmp_path, "checkpoints/old.pt")
    (tmp_path / "outputs").mkdir()
    tree = walk(tmp_path, BIG, ["checkpoints/"])
    assert {e.name for e in tree.entries} == {"train.py", "outputs/"}


def test_a_directory_over_the_size_limit_is_refused_early_naming_everything(
    tmp_path: Path,
) -> None:
    for i in range(40):
        write(tmp_path, f"data/part{i:02}.bin", b"\0" * 1024)
    write(tmp_path, "train.py")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(UploadRefused) as refused:
        walk(tmp_path, UploadLimits(max_bytes=10 * 1024, max_entries=1000))
    message = str(refused.value)
    assert f"cannot ship {tmp_path} to the Ray cluster" in message
    assert "upload limit of 10.0 KiB or 1,000 files and directories" in message
    # It stopped at the first file too many: train.py (1 byte), then 10 of the 40 parts.
    assert "found 10,241 bytes (10.0 KiB) in 11 files and 1 directory" in message
    assert "largest: data/ 10.0 KiB, train.py 1 B" in message
    assert LIMIT_ENV in message and "Nothing was uploaded" in message
    assert sorted(os.listdir(tmp_path)) == before


def test_a_directory_with_too_many_files_is_refused(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path, f"f{i}")
    with pytest.raises(UploadRefused, match=r"found 20 bytes \(20 B\) in 20 files and 0 dir"):
        walk(tmp_path, UploadLimits(max_bytes=10**9, max_entries=19))


def test_excluded_directories_do_not_count_against_the_limit(tmp_path: Path) -> None:
    write(tmp_path, ".venv/lib/torch.so", b"\0" * 50_000)
    write(tmp_path, "train.py")
    assert shipped(tmp_path, UploadLimits(max_bytes=1000, max_entries=10)) == {"train.py"}


def test_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert UploadLimits.from_env({}) == UploadLimits()
    assert UploadLimits.from_env({LIMIT_ENV: "250Mi", FILES_ENV: "20000"}) == UploadLimits(
        250 * 1024**2, 20000
    )
    for bad in ("lots", "-1", "0", "1.5"):
        with pytest.raises(UploadRefused, match=rf"{LIMIT_ENV}='{bad}': expected a quantity"):
            UploadLimits.from_env({LIMIT_ENV: bad})


def test_a_fifo_does_not_block_and_a_symlink_loop_is_entered_once(tmp_path: Path) -> None:
    write(tmp_path, "a/b/train.py")
    os.symlink(tmp_path / "a", tmp_path / "a" / "b" / "loop")
    os.mkfifo(tmp_path / "pipe")
    result: list[set[str]] = []
    worker = threading.Thread(target=lambda: result.append(shipped(tmp_path)), daemon=True)
    worker.start()
    worker.join(20)
    assert result == [{"a/b/train.py"}]


LINKS_OUT = {
    "a link to a file outside": ("secret", "creds"),
    "a link to a directory outside": ("keys", None),
    "a link nested in a subdirectory": ("sub/deeper/creds", "creds"),
}


@pytest.mark.parametrize(
    ("link", "target"), LINKS_OUT.values(), ids=[f"{k} is refused naming it" for k in LINKS_OUT]
)
def test_a_symlink_leading_out_of_the_directory_is_refused(
    tmp_path: Path, link: str, target: str | None
) -> None:
    outside = tmp_path / "home"
    write(outside, "creds", "token\n")
    root = tmp_path / "project"
    write(root, "train.py")
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside / target if target else outside, root / link)
    with pytest.raises(UploadRefused) as refused:
        walk(root, BIG)
    message = str(refused.value)
    assert f"{link} is a symbolic link to {outside.resolve()}" in message
    assert "outside the directory being shipped" in message


def test_links_within_the_directory_and_links_left_out_are_shipped_or_skipped(
    tmp_path: Path,
) -> None:
    write(tmp_path / "home", "creds")
    root = tmp_path / "project"
    write(root, "data/a.txt")
    os.symlink(root / "data" / "a.txt", root / "alias.txt")
    os.symlink(root / "data", root / "more")
    os.symlink(tmp_path / "home", root / "ignored-home")
    write(root, ".rayignore", "ignored-home\n")
    # "more" is "data" again: entered once (as a loop would be)
    assert shipped(root) == {".rayignore", "data/a.txt", "alias.txt"}


def test_the_package_holds_what_was_walked_and_nothing_written_to_disk(tmp_path: Path) -> None:
    script = write(tmp_path, "train.py", "print('hi')\n")
    script.chmod(0o755)
    grows = write(tmp_path, "run.log", b"first\n")
    (tmp_path / "out").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    tree = walk(tmp_path, BIG)
    with grows.open("ab") as handle:  # written after the walk: not shipped
        handle.write(b"later\n" * 1000)
    uri, data = package(tree)
    assert uri.startswith("gcs://_ray_pkg_trainop_") and uri.endswith(".zip")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert sorted(archive.namelist()) == ["out/", "run.log", "train.py"]
        assert archive.read("run.log") == b"first\n"
        assert archive.getinfo("train.py").external_attr >> 16 & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert package(tree)[0] == uri  # content-addressed: the same tree, the same URI


def test_packaging_the_current_directory_does_not_pack_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The incident: `trainop run -` ships the current directory; a package written into
    that directory while it is being zipped packs itself until the disk is full."""
    write(tmp_path, "train.py", "print('hi')\n")
    monkeypatch.chdir(tmp_path)
    _, data = package(walk(Path("."), BIG))
    assert len(data) < 1024
    assert sorted(os.listdir(tmp_path)) == ["train.py"]


def test_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UploadRefused, match="No such file"):
        walk(tmp_path / "missing", BIG)
    with pytest.raises(UploadRefused, match="not a directory"):
        walk(write(tmp_path, "file"), BIG)


def test_a_command_from_a_left_out_virtualenv_is_a_problem_naming_the_field(
    tmp_path: Path,
) -> None:
    write(tmp_path, "ps_train.py")
    write(tmp_path, ".venv/pyvenv.cfg")
    write(tmp_path, "venvs/mx/pyvenv.cfg")
    tree = walk(tmp_path, BIG)

    def container(*command: str) -> dict[str, object]:
        return {"name": "mxnet", "command": list(command)}

    specs = {
        "Scheduler": {"template": {"spec": {"containers": [container(".venv/bin/python")]}}},
        "Server": {"template": {"spec": {"initContainers": [container("./venvs/mx/bin/pip")]}}},
        "Worker": {"template": {"spec": {"containers": [container("python", "ps_train.py")]}}},
    }
    problems = unshipped_commands(specs, "mxReplicaSpecs", tree)
    assert [p.path for p in problems] == [
        "spec.mxReplicaSpecs.Scheduler.template.spec.containers[0].command[0]",
        "spec.mxReplicaSpecs.Server.template.spec.initContainers[0].command[0]",
    ]
    assert f".venv/bin/python is in {tmp_path / '.venv'}" in problems[0].message
    assert 'files="shared"' in problems[0].message
