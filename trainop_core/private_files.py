"""Private files: made by this process alone, never written through a link, owner-only.

Every file trainop writes that holds something private or stateful (job state, logs, tokens,
keys, kubeconfigs) goes through here, so that another local user who plants a file or a
symbolic link where one is about to be written gets nothing:

- a new file is created with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600: if anything is already at
  the path (a link included) the call fails instead of writing into it;
- a whole file is replaced atomically: its content goes to a new file created as above next to
  it, which `os.replace` then renames over the path (a rename replaces a link, never follows
  it), so readers see the old content or the new, never a part;
- a file kept open for appending (logs, events, locks) is opened with O_NOFOLLOW;
- a state file is read with `read_state_bytes`: opened with O_NOFOLLOW|O_NONBLOCK (a link is
  refused, a FIFO does not block the open), refused unless it is a regular file, and read only up
  to a bound;
- a private temporary directory is `tempfile.mkdtemp` (a random name, mode 0700), never a fixed
  name in the shared temporary directory.

A link found where a private file is written raises `OSError` (ELOOP or EEXIST) naming the
path; callers turn it into their own error with the path and the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any

FILE_MODE = 0o600
DIR_MODE = 0o700

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def create_new(path: str | os.PathLike[str], mode: int = FILE_MODE) -> int:
    """A descriptor (write-only) of a file that did not exist before this call. Raises
    FileExistsError if anything is at `path`, a symbolic link or a dangling one included."""
    return os.open(path, _NEW, mode)


def write_new(path: str | os.PathLike[str], data: str | bytes, mode: int = FILE_MODE) -> Path:
    """Create `path` (see `create_new`) holding `data`; a failed write leaves no file."""
    fd = create_new(path, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return Path(path)


def replace(path: str | os.PathLike[str], data: str | bytes, mode: int = FILE_MODE) -> Path:
    """Give `path` the content `data` atomically: readers see the old or the new file, never a
    part of one, and a link at `path` is replaced, not followed."""
    target = Path(path)
    for _ in range(16):  # a random name taken by someone else: try another
        temp = target.with_name(f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            write_new(temp, data, mode)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name next to it", str(target))
    try:
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return target


def open_append(path: str | os.PathLike[str], mode: str = "ab") -> IO[Any]:
    """Open a file for appending (readable too), created 0600 if needed; `mode` is "ab" or
    "a". A symbolic link at `path` is refused (OSError ELOOP), so appends never land in someone
    else's file."""
    return os.fdopen(append_fd(path), mode)


def append_fd(path: str | os.PathLike[str]) -> int:
    """`open_append` as a bare descriptor (for a child's standard output)."""
    return _open_nofollow(path, _APPEND)


def read_state_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at `path`: OSError naming the path if it is a link or not a
    regular file (a FIFO, a device, a directory: nothing of it is read), ValueError if it holds
    more than `limit` bytes (at most `limit + 1` are read to find out)."""
    fd = _open_nofollow(path, _READ)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        why = "is not a regular file (state is read from regular files only)"
        raise OSError(errno.EINVAL, why, str(path))
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return raw


def open_lock(path: str | os.PathLike[str]) -> int:
    """A descriptor for an fcntl lock file (read-write, created 0600 if needed, no link)."""
    return _open_nofollow(path, _LOCK)


def private_temp_dir(prefix: str) -> Path:
    """A new directory with an unpredictable name under the temporary directory, mode 0700."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def private_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a directory of this user's alone, made (mode 0700) if missing. One found there
    is used only if it is a real directory (not a link), this user's, and closed to others:
    otherwise `OSError` names the path and why (another local user may have planted it)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, DIR_MODE)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode):
        why = "is not a directory of its own (a symbolic link or a file is there)"
        raise OSError(errno.ENOTDIR, why, str(path))
    if found.st_uid != os.geteuid():
        raise OSError(errno.EPERM, f"belongs to another user (uid {found.st_uid})", str(path))
    if found.st_mode & 0o077:
        why = f"is open to other users (mode {stat.S_IMODE(found.st_mode):o}, 700 expected)"
        raise OSError(errno.EPERM, why, str(path))
    return Path(path)


def _open_nofollow(path: str | os.PathLike[str], flags: int) -> int:
    try:
        return os.open(path, flags, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            why = "is a symbolic link (private files are never opened through one)"
            raise OSError(errno.ELOOP, why, str(path)) from None
        raise
