"""A job's directory for a Ray cluster: walked with its excludes, bounded, packaged in memory.

Ray ships files to the nodes as a runtime_env `working_dir`: a zip stored in the cluster
(`gcs://...`) that each node unpacks once. The directory is the user's (the job file's, or the
`workdir=` given; a job given as data without one ships nothing), so trainop builds that
zip itself, safely:

- The tree is walked first, with the excludes applied, and the walk stops as soon as what it
  found exceeds the limit (`UploadLimits`: 100 MiB and 10,000 files and directories by
  default; `TRAINOP_RAY_UPLOAD_LIMIT`, `TRAINOP_RAY_UPLOAD_MAX_FILES`, or
  `RayBackend(upload_limits=...)`). A directory that is too big is refused with an error naming
  it, what was found and the limit, before anything is packaged or uploaded.
- Left out: `.git` (and other version-control directories), virtualenvs (`.venv`, `venv`, any
  directory holding `pyvenv.cfg` or `conda-meta`: they are not relocatable), `__pycache__` and
  tool caches, what `.gitignore`/`.rayignore` files list (in every directory, relative to it,
  as git reads them), and the job's own `excludes` patterns. Only regular files (and links to
  them) are read: a FIFO or a device never blocks the walk; a symlink loop is entered once. A
  symlink that leads out of the directory (to a home directory's keys, say) is refused, naming
  it, before anything is packaged: only what is under the directory the user named is shipped.
- The zip is built in memory, reading each file only up to the size the walk counted. Nothing
  is written to disk, least of all into the directory being packaged: Ray's own upload helper
  writes its zip into the current directory unless given a scratch directory, and when that is
  the directory being zipped, the zip packs itself until the disk is full. A file that grows
  meanwhile (a log) cannot grow the package either.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import InvalidOperation
from pathlib import Path
from typing import Any

from pathspec import GitIgnoreSpec

from trainop_core.errors import Problem, TerminalError
from trainop_core.gang import parse_quantity

LIMIT_ENV = "TRAINOP_RAY_UPLOAD_LIMIT"  # a quantity of bytes: "100Mi", "1Gi", "500000000"
FILES_ENV = "TRAINOP_RAY_UPLOAD_MAX_FILES"
DEFAULT_MAX_BYTES = 100 * 1024**2
DEFAULT_MAX_ENTRIES = 10_000
SCAN_FACTOR = 10  # entries looked at (excluded ones too) may be this many times the limit
IGNORE_FILES = (".gitignore", ".rayignore")
IGNORE_FILE_MAX_BYTES = 1024 * 1024
# Never shipped: version control, virtualenvs, byte-code and tool caches.
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".tox", ".nox"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}
)
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")  # a directory holding one is an environment
CHUNK_BYTES = 1024 * 1024
PACKAGE_PREFIX = "gcs://_ray_pkg_trainop_"


Rules = list[tuple[str, GitIgnoreSpec]]  # ignore patterns, each relative to a directory


class UploadRefused(TerminalError):
    """The job's directory cannot be shipped (too big, unreadable, not a directory); nothing
    was packaged or uploaded."""


@dataclass(frozen=True)
class UploadLimits:
    """At most `max_bytes` of file content and `max_entries` files and directories."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_entries: int = DEFAULT_MAX_ENTRIES

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_entries <= 0:
            raise UploadRefused(f"upload limits must be positive, got {self}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> UploadLimits:
        """The defaults, overridden by TRAINOP_RAY_UPLOAD_LIMIT / _MAX_FILES when set."""
        environ = os.environ if environ is None else environ
        max_bytes, max_entries = DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES
        if environ.get(LIMIT_ENV):
            max_bytes = _env_number(LIMIT_ENV, environ[LIMIT_ENV], "a quantity of bytes (100Mi)")
        if environ.get(FILES_ENV):
            max_entries = _env_number(FILES_ENV, environ[FILES_ENV], "a whole number")
        return cls(max_bytes, max_entries)

    def describe(self) -> str:
        return f"{_size(self.max_bytes)} or {self.max_entries:,} files and directories"


def _env_number(name: str, text: str, expected: str) -> int:
    try:
        value = parse_quantity(text)
    except (InvalidOperation, ValueError):
        value = None
    if value is None or value <= 0 or value != value.to_integral_value():
        raise UploadRefused(f"{name}={text!r}: expected {expected} greater than 0")
    return int(value)


@dataclass(frozen=True)
class Entry:
    """One member of the package: a file (`path`, `size` bytes) or a directory (path None)."""

    name: str  # relative, "/"-separated; directories end with "/"
    path: Path | None
    size: int = 0


@dataclass(frozen=True)
class Tree:
    """What a walk found to ship from `root`."""

    root: Path
    entries: tuple[Entry, ...]
    total_bytes: int
    left_out: tuple[str, ...]  # directories excluded by trainop's own rules (venvs, .git, ...)

    def describe(self) -> str:
        files = sum(1 for e in self.entries if e.path is not None)
        return f"{_count(files, 'file')}, {_size(self.total_bytes)}"


def walk(root: Path, limits: UploadLimits, excludes: Sequence[str] = ()) -> Tree:
    """The files under `root` to ship, excludes applied (see the module docstring). Raises
    UploadRefused as soon as they exceed `limits`, or if `root` is not a readable directory."""
    try:
        top = Path(root).resolve(strict=True)
    except OSError as exc:
        raise UploadRefused(f"cannot ship {root} to the Ray cluster: {exc.strerror}") from None
    if not top.is_dir():
        raise UploadRefused(f"cannot ship {top} to the Ray cluster: it is not a directory")
    return _Walker(top, limits).run(excludes)


@dataclass
class _Walker:
    root: Path
    limits: UploadLimits
    entries: list[Entry] = field(default_factory=list)
    total: int = 0
    scanned: int = 0
    left_out: list[str] = field(default_factory=list)
    by_top: dict[str, int] = field(default_factory=dict)  # size per top-level entry, for errors
    seen: set[tuple[int, int]] = field(default_factory=set)  # directories entered (loops)

    def run(self, excludes: Sequence[str]) -> Tree:
        rules: Rules = [("", GitIgnoreSpec.from_lines(list(excludes)))] if excludes else []
        stack: list[tuple[str, str, Rules]] = [(str(self.root), "", rules)]
        self._enter(str(self.root))
        while stack:
            directory, rel, inherited = stack.pop()
            rules = inherited + self._ignore_files(directory, rel)
            for entry in self._scan(directory):
                child = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir():
                    if self._keep_dir(entry, child, rules):
                        self._refuse_escaping_link(entry, child)
                        self._add(Entry(child + "/", None))
                        stack.append((entry.path, child, rules))
                elif entry.is_file() and not _ignored(child, False, rules):
                    self._refuse_escaping_link(entry, child)
                    self._add(Entry(child, Path(entry.path), _stat_size(entry)))
        return Tree(self.root, tuple(self.entries), self.total, tuple(self.left_out))

    def _scan(self, directory: str) -> list[os.DirEntry[str]]:
        found = []
        with contextlib.suppress(OSError), os.scandir(directory) as it:  # unreadable: skipped
            for entry in it:
                self.scanned += 1
                if self.scanned > self.limits.max_entries * SCAN_FACTOR:
                    raise self._refusal(f"more than {self.scanned - 1:,} entries to look through")
                found.append(entry)
        return sorted(found, key=lambda e: e.name)

    def _keep_dir(self, entry: os.DirEntry[str], child: str, rules: Rules) -> bool:
        if entry.name in EXCLUDED_DIRS or _is_environment(entry.path):
            self.left_out.append(child + "/")
            return False
        return not _ignored(child, True, rules) and self._enter(entry.path)

    def _enter(self, path: str) -> bool:
        """False for a directory already entered (through a symlink loop)."""
        try:
            info = os.stat(path)
        except OSError:
            return False
        key = (info.st_dev, info.st_ino)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def _refuse_escaping_link(self, entry: os.DirEntry[str], child: str) -> None:
        """A symlink (to a file or directory) that leads out of the root would ship what the
        user never named (a link to ~/.ssh): refused, naming it. Links within the root are fine."""
        if not entry.is_symlink():
            return
        target = Path(os.path.realpath(entry.path))
        if target == self.root or self.root in target.parents:
            return
        raise UploadRefused(
            f"cannot ship {self.root} to the Ray cluster: {child} is a symbolic link to {target}, "
            "outside the directory being shipped. Nothing was uploaded. Remove the link, leave it "
            "out (.rayignore or the job's excludes), or copy what it points to into the directory."
        )

    def _ignore_files(self, directory: str, rel: str) -> Rules:
        rules: Rules = []
        for name in IGNORE_FILES:
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if os.path.isfile(path):
                    with open(path, encoding="utf-8") as handle:
                        lines = handle.read(IGNORE_FILE_MAX_BYTES).splitlines()
                    rules.append((rel, GitIgnoreSpec.from_lines(lines)))
        return rules

    def _add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.total += entry.size
        top = entry.name.split("/", 1)[0] + ("/" if "/" in entry.name else "")
        self.by_top[top] = self.by_top.get(top, 0) + entry.size
        if self.total > self.limits.max_bytes or len(self.entries) > self.limits.max_entries:
            files = sum(1 for e in self.entries if e.path is not None)
            dirs = len(self.entries) - files
            counted = f"{_count(files, 'file')} and {_count(dirs, 'directory', 'directories')}"
            raise self._refusal(f"{self.total:,} bytes ({_size(self.total)}) in {counted}")

    def _refusal(self, found: str) -> UploadRefused:
        largest = sorted(self.by_top.items(), key=lambda item: -item[1])[:3]
        biggest = ", ".join(f"{name} {_size(size)}" for name, size in largest if size)
        return UploadRefused(
            f"cannot ship {self.root} to the Ray cluster: it holds more than the upload limit of "
            f"{self.limits.describe()} (found {found}"
            + (f"; largest: {biggest}" if biggest else "")
            + "). Nothing was uploaded. Leave files out with a .rayignore (or .gitignore) file, "
            "give the job a smaller directory (the job file's directory, or workdir=), raise the "
            f"limit ({LIMIT_ENV}=500Mi, {FILES_ENV}=50000; Ray stores at most 512 MiB), or on a "
            'shared filesystem ship nothing (files="shared", --ray-files shared).'
        )


def _ignored(rel: str, is_dir: bool, rules: Rules) -> bool:
    for base, spec in rules:
        sub = rel[len(base) + 1 :] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):
            return True
    return False


def _is_environment(path: str) -> bool:
    return any(os.path.exists(os.path.join(path, marker)) for marker in ENV_MARKERS)


def _stat_size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat().st_size
    except OSError:
        return 0


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# --- packaging -----------------------------------------------------------------------------------
def package(tree: Tree) -> tuple[str, bytes]:
    """The zip of `tree` (in memory) and its content-addressed `gcs://` URI."""
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for entry in sorted(tree.entries, key=lambda e: e.name):
            digest.update(entry.name.encode() + b"\0")
            if entry.path is None:
                info = zipfile.ZipInfo(entry.name)
                info.external_attr = (stat.S_IFDIR | 0o755) << 16
                archive.writestr(info, b"")
            else:
                _add_file(archive, entry, digest)
    return f"{PACKAGE_PREFIX}{digest.hexdigest()[:32]}.zip", buffer.getvalue()


def _add_file(archive: zipfile.ZipFile, entry: Entry, digest: Any) -> None:
    """At most `entry.size` bytes of a regular file (anything else is left out)."""
    assert entry.path is not None
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
    except OSError:
        return
    with os.fdopen(fd, "rb") as source:
        info_stat = os.fstat(fd)
        if not stat.S_ISREG(info_stat.st_mode):
            return
        info = zipfile.ZipInfo(entry.name, _zip_time(info_stat.st_mtime))
        info.external_attr = (stat.S_IMODE(info_stat.st_mode) | stat.S_IFREG) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        digest.update(str(info.external_attr).encode())
        left = entry.size
        with archive.open(info, "w") as target:
            while left > 0:
                chunk = source.read(min(CHUNK_BYTES, left))
                if not chunk:
                    break
                target.write(chunk)
                digest.update(chunk)
                left -= len(chunk)


def _zip_time(mtime: float) -> tuple[int, int, int, int, int, int]:
    year, month, day, hour, minute, second = time.localtime(max(mtime, 315532800))[:6]
    return (max(year, 1980), month, day, hour, minute, second)


def store(tree: Tree) -> str:
    """Package `tree` and store it in the connected Ray cluster (once per content); the
    `gcs://` URI for a runtime_env's working_dir."""
    from ray._private.runtime_env.packaging import (
        package_exists,
        pin_runtime_env_uri,
        upload_package_to_gcs,
    )

    uri, data = package(tree)
    try:
        pin_runtime_env_uri(uri)  # kept until the supervisor's actor refers to it
        if not package_exists(uri):
            upload_package_to_gcs(uri, data)
    except (RuntimeError, ValueError) as exc:
        raise UploadRefused(f"cannot ship {tree.root} to the Ray cluster: {exc}") from exc
    return uri


def ship(root: Path, limits: UploadLimits, excludes: Sequence[str] = ()) -> tuple[str, Tree]:
    """`walk`, then `store`: the URI and what was shipped."""
    tree = walk(root, limits, excludes)
    return store(tree), tree


def unshipped_commands(specs: Mapping[str, Any], replica_field: str, tree: Tree) -> list[Problem]:
    """Containers whose command is a relative path into a directory left out of `tree` (such as
    `.venv/bin/python`): on the nodes it would not exist. Pure."""
    problems = []
    for rtype, spec in specs.items():
        pod = ((spec or {}).get("template") or {}).get("spec") or {}
        for group in ("initContainers", "containers"):
            for i, container in enumerate(pod.get(group) or []):
                command = container.get("command") or []
                program = os.path.normpath(str(command[0])) if command else "/"
                where = next((d for d in tree.left_out if program.startswith(d)), None)
                if where is not None and not os.path.isabs(program):
                    path = f"spec.{replica_field}.{rtype}.template.spec.{group}[{i}].command[0]"
                    problems.append(Problem(path, _unshipped(program, tree.root / where)))
    return problems


def _unshipped(program: str, directory: Path) -> str:
    return (
        f"{program} is in {directory}, which is never shipped to Ray nodes (version control, "
        "virtualenvs and caches are left out; a virtualenv is not relocatable): install what it "
        'provides on the nodes (or with the runtime-env field "pip"), or on a shared filesystem '
        'ship nothing and use the same path (files="shared", --ray-files shared)'
    )
