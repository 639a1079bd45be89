"""Private files are made by us alone: a file or link planted where one is written gets nothing,
and what is written is readable by its owner only."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from trainop_core.private_files import (
    append_fd,
    open_append,
    open_lock,
    private_dir,
    private_temp_dir,
    read_state_bytes,
    replace,
    write_new,
)


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A link at `tmp_path/private` to a file someone else would like to read or spoil."""
    target = tmp_path / "theirs"
    target.write_text("untouched")
    link = tmp_path / "private"
    link.symlink_to(target)
    return link, target


def test_a_new_file_is_never_created_through_a_planted_link(planted: tuple[Path, Path]) -> None:
    link, target = planted
    with pytest.raises(FileExistsError):
        write_new(link, "secret")
    assert target.read_text() == "untouched" and link.is_symlink()


def test_a_new_file_is_never_created_through_a_dangling_link(tmp_path: Path) -> None:
    link = tmp_path / "private"
    link.symlink_to(tmp_path / "to-be-created")
    with pytest.raises(FileExistsError):
        write_new(link, "secret")
    assert not (tmp_path / "to-be-created").exists()


def test_a_replaced_file_replaces_a_planted_link_instead_of_following_it(
    planted: tuple[Path, Path],
) -> None:
    link, target = planted
    replace(link, "secret")
    assert target.read_text() == "untouched"
    assert not link.is_symlink() and link.read_text() == "secret"
    assert link.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "opener",
    [
        lambda p: open_append(p).close(),
        lambda p: os.close(append_fd(p)),
        lambda p: os.close(open_lock(p)),
    ],
    ids=["appending", "appending by descriptor", "locking"],
)
def test_a_file_kept_open_is_never_opened_through_a_planted_link(
    planted: tuple[Path, Path], opener: Callable[[Path], None]
) -> None:
    link, target = planted
    with pytest.raises(OSError, match="is a symbolic link"):
        opener(link)
    assert target.read_text() == "untouched"


def test_private_files_and_directories_are_owner_only(tmp_path: Path) -> None:
    umask = os.umask(0o022)  # the usual one: group and others could read what it allows
    directory = private_temp_dir("trainop-test-")
    try:
        assert directory.stat().st_mode & 0o777 == 0o700
        paths = [write_new(directory / "a", "x"), replace(directory / "b", "x")]
        with open_append(directory / "c"):
            paths.append(directory / "c")
        assert {oct(p.stat().st_mode & 0o777) for p in paths} == {"0o600"}
    finally:
        os.umask(umask)
        for path in directory.iterdir():
            path.unlink()
        directory.rmdir()


def test_concurrent_replaces_leave_one_whole_file_and_no_temporary_one(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    texts = [str(n) * 100_000 for n in range(8)]
    threads = [threading.Thread(target=replace, args=(path, text)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert path.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_private_directory_is_made_owner_only_and_reused_when_it_is_ours(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "node")
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    (made / "kept").write_text("x")
    assert (private_dir(made) / "kept").read_text() == "x"  # a second replica on the node


def test_a_planted_link_or_open_directory_is_never_taken_for_a_private_one(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "linked"
    link.symlink_to(elsewhere)
    with pytest.raises(OSError, match="not a directory of its own"):
        private_dir(link)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match="not a directory of its own"):
        private_dir(tmp_path / "file")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(OSError, match="open to other users"):
        private_dir(shared)
    assert list(elsewhere.iterdir()) == []  # nothing was written through the link


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (lambda p: os.mkfifo(p), "is not a regular file"),
        (lambda p: os.symlink("/dev/zero", p), "is a symbolic link"),
        (lambda p: p.mkdir(), "is not a regular file"),
    ],
    ids=["a FIFO (which would block a plain open)", "a link to /dev/zero", "a directory"],
)
def test_a_state_read_refuses_what_is_not_a_regular_file_without_blocking(
    tmp_path: Path, plant: Callable[[Path], object], why: str
) -> None:
    path = tmp_path / "queues.json"
    plant(path)
    with pytest.raises(OSError, match=why) as caught:
        read_state_bytes(path, 1024)  # a plain open of the FIFO would wait here for a writer
    assert str(path) in str(caught.value)


def test_a_state_read_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 2048)
    assert read_state_bytes(path, 2048) == b"x" * 2048
    with pytest.raises(ValueError, match="larger than 1024 bytes"):
        read_state_bytes(path, 1024)
