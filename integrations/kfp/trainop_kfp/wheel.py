"""The trainop a KFP component installs when it starts: a wheel of the very code that compiled the
pipeline, carried inside the component's command. No package index is asked for trainop.

`build_wheel` zips trainop's packages as this process finds them, with a `trainop` dist-info
whose `Requires-Dist` lines are trainop's requirements outside any extra
(`importlib.metadata.requires("trainop")`) and whose entry points are the installed ones. It needs
no build tool and works from a checkout or an installed trainop alike; the same sources give the
same bytes, so a compiled pipeline changes only when the code does.

`install_stage` turns the wheel into one more `sh -c` stage of a lightweight component's command
(see `trainop_kfp.components.component`): the wheel travels xz-compressed and base64-encoded in
arguments of at most 64 KiB (Linux refuses a single argument over 128 KiB), is checked against its
SHA-256 and written under a fresh `mktemp -d` directory. pip then installs `trainop==<version>`
from that directory only (`--no-index`: already installed, as under kfp.local, it is left alone),
and the requirements, named in the command, from the pod's index as for any release.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import io
import lzma
import re
import shlex
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import trainop_core

DISTRIBUTION = "trainop"
PACKAGES = ("trainop_core", "trainop_kfp", "trainop_flyte", "trainop_hpo")  # all of trainop
CHUNK = 65536
_SHIPPED = {".py", ".json", ".typed"}  # sources and package data, as the release wheel has them
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest time: no build time in the bytes
_EXTRA = re.compile(r";.*\bextra\s*==")


@dataclass(frozen=True)
class Wheel:
    """A built wheel: its file name (which pip parses) and its bytes."""

    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def runtime_requirements() -> list[str]:
    """trainop's requirements outside any extra, as its installed metadata declares them."""
    return [r for r in importlib.metadata.requires(DISTRIBUTION) or [] if not _EXTRA.search(r)]


@lru_cache(maxsize=1)
def build_wheel() -> Wheel:
    """The `trainop` wheel of the code this process imported (built once per process)."""
    version = trainop_core.__version__
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    files = dict(_package_files())
    files[f"{dist_info}/METADATA"] = _metadata(version).encode()
    files[f"{dist_info}/WHEEL"] = _WHEEL.encode()
    files[f"{dist_info}/entry_points.txt"] = _entry_points().encode()
    files[f"{dist_info}/RECORD"] = _record(files, f"{dist_info}/RECORD").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as wheel:  # xz compresses it whole
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
    return Wheel(f"{DISTRIBUTION}-{version}-py3-none-any.whl", buffer.getvalue())


def install_stage(wheel: Wheel) -> list[str]:
    """`sh -c SCRIPT sh CHUNK...`: installs `wheel`, then runs the rest of the command line."""
    chunks = _chunks(wheel)
    decode = _DECODE.format(end=2 + len(chunks), sha256=wheel.sha256)
    name, version = wheel.filename.split("-")[:2]
    requirements = " ".join(shlex.quote(r) for r in runtime_requirements())
    script = _SCRIPT.format(
        decode=decode,
        filename=wheel.filename,
        count=len(chunks),
        pinned=shlex.quote(f"{name}=={version}"),
        requirements=f"{_PIP} {requirements}\n" if requirements else "",
    )
    return ["sh", "-c", script, "sh", *chunks]


@lru_cache(maxsize=2)
def _chunks(wheel: Wheel) -> tuple[str, ...]:
    """The wheel xz-compressed and base64-encoded, in CHUNK-sized parts (once per process: the
    compression takes a second or two, and every component of a pipeline carries it)."""
    payload = base64.b64encode(lzma.compress(wheel.data, preset=9)).decode()
    return tuple(payload[i : i + CHUNK] for i in range(0, len(payload), CHUNK))


def _package_files() -> list[tuple[str, bytes]]:
    found = []
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)  # found, not imported (no flytekit needed)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"trainop's package {package} is not importable here")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and path.suffix in _SHIPPED and "__pycache__" not in relative.parts:
                found.append((f"{package}/{relative.as_posix()}", path.read_bytes()))
    return found


def _metadata(version: str) -> str:
    installed = importlib.metadata.metadata(DISTRIBUTION)
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DISTRIBUTION}",
        f"Version: {version}",
        f"Summary: {installed['Summary'] or ''}",
        f"Requires-Python: {installed['Requires-Python'] or '>=3.10'}",
        *(f"Requires-Dist: {requirement}" for requirement in runtime_requirements()),
    ]
    return "\n".join(lines) + "\n"


def _entry_points() -> str:
    return importlib.metadata.distribution(DISTRIBUTION).read_text("entry_points.txt") or ""


def _record(files: dict[str, bytes], record: str) -> str:
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    lines = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()]
    return "\n".join([*lines, f"{record},,"]) + "\n"


_WHEEL = """\
Wheel-Version: 1.0
Generator: trainop_kfp.wheel
Root-Is-Purelib: true
Tag: py3-none-any
"""

# Runs in the pod's python3; argv[1] is where to write, argv[2:end] the chunks. No single quote.
_DECODE = """\
import base64, hashlib, lzma, sys
try:
    data = lzma.decompress(base64.b64decode("".join(sys.argv[2:{end}]), validate=True))
except (ValueError, lzma.LZMAError) as error:  # not base64, not xz
    data = str(error).encode()
if hashlib.sha256(data).hexdigest() != "{sha256}":
    sys.exit("the trainop wheel in this command is damaged: its SHA-256 differs")
open(sys.argv[1], "wb").write(data)
"""

_SCRIPT = """\
set -e
wheels=$(mktemp -d)
python3 -c '{decode}' "$wheels/{filename}" "$@"
shift {count}
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install --quiet --no-warn-script-location --no-index --no-deps \
--find-links "$wheels" {pinned}
{requirements}exec "$@"
"""
_PIP = "python3 -m pip install --quiet --no-warn-script-location"
