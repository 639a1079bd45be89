"""The real control plane's binaries, built or found once per machine and cached.

* **kube-apiserver**, **kube-controller-manager** and **kube-scheduler** are not published by
  any package registry, so they are built with this machine's Go from the Go module proxy: a
  scratch module requires ``k8s.io/kubernetes`` at :data:`KUBERNETES_VERSION` and pins every
  staging module that version's own go.mod replaces with a local path to its published
  ``v0.Y.Z`` tag.
* **etcd** is built the same way from its server module at :data:`ETCD_VERSION`, the newest
  patch of etcd 3.6, the minor line Kubernetes 1.36 is released and tested with (PyPI's only etcd
  wheel carries 3.5.1, in the 3.5.0-3.5.2 range etcd's maintainers flagged for data
  inconsistency). Its go.mod replaces its sibling modules (api, client, pkg) with local paths:
  they are pinned to the same tag; its ``FORBIDDEN_DEPENDENCY`` guards are dropped.

:func:`build_go_packages` is the reusable part: it builds some main packages of any published
Go module into the cache (a benchmark builds upstream's Go operator with it).

The cache lives under ``$TRAINOP_CACHE_DIR`` (default ``~/.cache/trainop``), one directory per
module, version, platform and build recipe, so a version bump builds again. A build writes into a
temporary directory renamed into place when it is complete (a killed build leaves nothing that
looks valid) and holds a file lock, so two concurrent runs build once.

Command line: ``python -m trainop_core.testing.binaries [--check] [--json]``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The one place the Kubernetes version of the test control plane is pinned.
KUBERNETES_VERSION = "v1.36.3"

KUBERNETES_MODULE = "k8s.io/kubernetes"
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

#: The one place the etcd version of the test control plane is pinned.
ETCD_VERSION = "v3.6.16"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"  # its root package is etcd's main
BUILD_COMMAND = "python -m trainop_core.testing.binaries"
_RECIPE = 1  # bump when the build steps change in a way that needs a rebuild
_GO_BUILD_FLAGS = ("-trimpath",)
_LDFLAGS = "-s -w"


class BinaryBuildError(RuntimeError):
    """A binary is missing and could not be built; the message says why and what to run."""


@dataclass(frozen=True)
class KubeBinaries:
    """Where the control plane's binaries are on this machine."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path


def cache_dir() -> Path:
    """The per-machine cache: ``$TRAINOP_CACHE_DIR`` or ``~/.cache/trainop``."""
    configured = os.environ.get("TRAINOP_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "trainop"


def kubernetes_binaries(
    *, build: bool = True, log: Callable[[str], None] | None = None
) -> KubeBinaries:
    """The binaries, building the Kubernetes ones first if they are not cached and `build` is true.

    Raises :class:`BinaryBuildError` when one is missing (and `build` is false) or its build fails.
    """
    commands = _kubernetes_commands(build=build, log=log)
    return KubeBinaries(
        etcd=etcd_binary(build=build, log=log),
        kube_apiserver=commands["kube-apiserver"],
        kube_controller_manager=commands["kube-controller-manager"],
        kube_scheduler=commands["kube-scheduler"],
    )


def etcd_binary(*, build: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """etcd :data:`ETCD_VERSION`, built from the Go module proxy into the cache (or reused)."""
    built = build_go_packages(
        ETCD_MODULE, ETCD_VERSION, [ETCD_MODULE], pin_local_replaces=etcd_pin, build=build, log=log
    )
    return built[binary_name(ETCD_MODULE)]


def etcd_pin(module: str) -> str | None:
    """etcd's rule for its own modules: one tag for all of them; anything else it replaces with
    a local path is a guard against depending on it (``./FORBIDDEN_DEPENDENCY``): dropped."""
    return ETCD_VERSION if module.startswith("go.etcd.io/etcd/") else None


def staging_pin(version: str) -> Callable[[str], str]:
    """Kubernetes' rule for its staging modules: ``k8s.io/kubernetes v1.Y.Z`` goes with
    ``k8s.io/<staging module> v0.Y.Z``."""
    match = re.fullmatch(r"v1\.(\d+\.\d+.*)", version)
    if not match:
        raise BinaryBuildError(f"not a Kubernetes v1.Y.Z version: {version!r}")
    return lambda _module: f"v0.{match.group(1)}"


def kubernetes_version_stamp(version: str) -> dict[str, str]:
    """The link-time variables Kubernetes' own build sets, so ``/version`` (and ``kubectl
    version``) report `version` instead of ``v0.0.0-master``."""
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    packages = ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version")
    return {f"{package}.{name}": value for package in packages for name, value in values.items()}


def _kubernetes_commands(*, build: bool, log: Callable[[str], None] | None) -> dict[str, Path]:
    packages = [f"{KUBERNETES_MODULE}/cmd/{name}" for name in KUBERNETES_COMMANDS]
    return build_go_packages(
        KUBERNETES_MODULE,
        KUBERNETES_VERSION,
        packages,
        pin_local_replaces=staging_pin(KUBERNETES_VERSION),
        link_variables=kubernetes_version_stamp(KUBERNETES_VERSION),
        build=build,
        log=log,
    )


def build_go_packages(
    module: str,
    version: str,
    packages: Sequence[str],
    *,
    pin_local_replaces: Callable[[str], str | None] | None = None,
    link_variables: Mapping[str, str] | None = None,
    build: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Build the main `packages` of the published Go `module` at `version` into the cache (or
    reuse an earlier build) and return each binary's path by its name (the package's last element).

    The module's own ``replace`` directives that name another module are kept; the ones that point
    at a local directory (Kubernetes' staging tree) are pinned to ``pin_local_replaces(module)``,
    and without that function they are an error (a pin of None drops the replace). Each binary
    is named as ``go build`` names it (:func:`binary_name`). `link_variables` are set with
    ``-ldflags -X`` (e.g. a version stamp). All packages build in one ``go build`` (one compile
    of the shared code) with ``-trimpath -ldflags "-s -w"``, ``CGO_ENABLED=0``, under ``nice``.
    Raises :class:`BinaryBuildError` when Go is missing or the build fails, or, with `build`
    false, when the binaries are not cached.
    """
    log = log or _stderr
    ldflags = " ".join(
        [_LDFLAGS, *(f"-X {k}={v}" for k, v in sorted((link_variables or {}).items()))]
    )
    target = cache_dir() / "go-bin" / _build_key(module, version, packages, ldflags)
    names = [binary_name(package) for package in packages]
    if _complete(target, names):
        return {name: target / name for name in names}
    if not build:
        raise BinaryBuildError(
            f"{', '.join(names)} ({module}@{version}) not built on this machine; "
            f"build them with: {BUILD_COMMAND}"
        )
    with _locked(target.with_name(target.name + ".lock"), log):
        if not _complete(target, names):  # another process may have built it while we waited
            for leftover in target.parent.glob(f".{target.name}.*"):  # from a killed build
                shutil.rmtree(leftover, ignore_errors=True)
            _build(module, version, packages, target, pin_local_replaces, ldflags, log)
    return {name: target / name for name in names}


def binary_name(package: str) -> str:
    """The name ``go build`` gives the binary of a main package: its last path element, or the one
    before a major-version element (``go.etcd.io/etcd/server/v3`` builds ``server``)."""
    elements = package.rstrip("/").split("/")
    if len(elements) > 1 and re.fullmatch(r"v[2-9]|v[1-9][0-9]+", elements[-1]):
        return elements[-2]
    return elements[-1]


def _build_key(module: str, version: str, packages: Sequence[str], ldflags: str) -> str:
    recipe = json.dumps([_RECIPE, module, version, sorted(packages), _GO_BUILD_FLAGS, ldflags])
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:10]
    platform = f"{sys.platform}-{os.uname().machine}"
    return f"{module.replace('/', '+')}@{version}-{platform}-{digest}"


def _complete(target: Path, names: Sequence[str]) -> bool:
    # The directory only appears by an atomic rename once every binary in it is written.
    return all(os.access(target / name, os.X_OK) for name in names)


@contextmanager
def _locked(lock_path: Path, log: Callable[[str], None]) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build that holds {lock_path}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(
    module: str,
    version: str,
    packages: Sequence[str],
    target: Path,
    pin_local_replaces: Callable[[str], str | None] | None,
    ldflags: str,
    log: Callable[[str], None],
) -> None:
    go = _go_command()
    env = _go_env(go)
    started = time.monotonic()
    log(f"building {', '.join(packages)} of {module}@{version} with {_go_version(go)}")
    log("(a cold build takes minutes on 2 cores, more on a busy one; later runs reuse the cache)")
    workdir = cache_dir() / "go-src" / target.name
    workdir.parent.mkdir(parents=True, exist_ok=True)
    _write_scratch_module(go, env, module, version, packages, workdir, pin_local_replaces)
    _run([go, "mod", "tidy"], workdir, env, "go mod tidy")
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        command = [
            go,
            "build",
            *_GO_BUILD_FLAGS,
            f"-ldflags={ldflags}",
            "-o",
            f"{staging}/",
            *packages,
        ]
        _run(_nice(command), workdir, env, "go build", heartbeat=log)
        shutil.rmtree(target, ignore_errors=True)  # an older incomplete copy, never a valid one
        staging.chmod(0o755)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"built in {time.monotonic() - started:.0f} s into {target}")


def _write_scratch_module(
    go: str,
    env: dict[str, str],
    module: str,
    version: str,
    packages: Sequence[str],
    workdir: Path,
    pin_local_replaces: Callable[[str], str | None] | None,
) -> None:
    """A module that requires `module@version`, lists the packages as tools (so tidy keeps their
    dependencies) and carries the published module's replaces, local ones pinned."""
    upstream = _published_go_mod(go, env, module, version)
    godebug: list[dict[str, str]] = upstream.get("Godebug") or []
    replaces: list[dict[str, dict[str, str]]] = upstream.get("Replace") or []
    lines = [
        "module trainop.invalid/build",
        "",
        f"go {upstream.get('Go') or '1.24'}",
        *(f"godebug {item['Key']}={item['Value']}" for item in godebug),
        "",
        f"require {module} {version}",
        "",
        *(f"tool {package}" for package in packages),
        "",
        *filter(None, (_replace_line(module, item, pin_local_replaces) for item in replaces)),
    ]
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")


def _replace_line(
    module: str, item: dict[str, dict[str, str]], pin: Callable[[str], str | None] | None
) -> str | None:
    old, new = item["Old"], item["New"]
    old_text = old["Path"] + (f" {old['Version']}" if old.get("Version") else "")
    if new.get("Version"):
        return f"replace {old_text} => {new['Path']} {new['Version']}"
    if pin is None:
        raise BinaryBuildError(
            f"{module} replaces {old['Path']} with the local path {new['Path']}; "
            "pass pin_local_replaces to say which published version to use instead"
        )
    pinned = pin(old["Path"])
    return f"replace {old_text} => {old['Path']} {pinned}" if pinned else None


def _published_go_mod(go: str, env: dict[str, str], module: str, version: str) -> dict[str, Any]:
    download = _run(
        [go, "mod", "download", "-json", f"{module}@{version}"], cache_dir(), env, "go mod download"
    )
    go_mod = json.loads(download).get("GoMod")
    if not go_mod:
        raise BinaryBuildError(f"go mod download {module}@{version} gave no go.mod:\n{download}")
    parsed: dict[str, Any] = json.loads(
        _run([go, "mod", "edit", "-json", go_mod], cache_dir(), env, "go mod edit")
    )
    return parsed


def go_module_dir(module: str, version: str) -> Path:
    """The source tree of the published Go `module` at `version` in Go's module cache (read-only),
    downloaded from the module proxy if it is not there. Raises :class:`BinaryBuildError`."""
    go = _go_command()
    download = _run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cache_dir(),
        _go_env(go),
        "go mod download",
    )
    directory = json.loads(download).get("Dir")
    if not directory:
        raise BinaryBuildError(f"go mod download {module}@{version} gave no directory:\n{download}")
    return Path(directory)


def _go_command() -> str:
    go = shutil.which("go")
    if not go:
        raise BinaryBuildError(
            f"Go is not installed (no 'go' on PATH): it is needed once per machine to build "
            f"kube-apiserver, kube-controller-manager and kube-scheduler {KUBERNETES_VERSION} "
            f"and etcd {ETCD_VERSION} (Go 1.26.x, https://go.dev/dl/)"
        )
    return go


def _go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()


def _go_env(go: str) -> dict[str, str]:
    """Go's environment for the build: this machine's toolchain only (no silent toolchain
    download), static binaries, and the JSON v1 encoder Kubernetes 1.36 was released with."""
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0")
    match = re.match(r"go1\.(\d+)", _go_version(go))
    if not match:
        raise BinaryBuildError(f"cannot tell the version of {go}: {_go_version(go)!r}")
    minor = int(match.group(1))
    if minor < 24:
        raise BinaryBuildError(f"{_go_version(go)} is too old: Go 1.26.x builds Kubernetes 1.36")
    if minor >= 25:
        # Go 1.27 turns the jsonv2 experiment on by default; a kube-apiserver 1.36 built with it
        # serves broken OpenAPI ("$root has invalid property: Extensions"). Go that no longer
        # knows the experiment fails the build with its own clear "unknown GOEXPERIMENT" error.
        experiments = [e for e in env.get("GOEXPERIMENT", "").split(",") if e and e != "jsonv2"]
        env["GOEXPERIMENT"] = ",".join([*experiments, "nojsonv2"])
    return env


def _nice(command: list[str]) -> list[str]:
    nice = shutil.which("nice")
    return [nice, "-n", "10", *command] if nice else command


def _run(
    command: list[str],
    cwd: Path | None,
    env: dict[str, str],
    what: str,
    heartbeat: Callable[[str], None] | None = None,
) -> str:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        started = time.monotonic()
        while True:
            try:
                process.wait(timeout=60)
                break
            except subprocess.TimeoutExpired:
                if heartbeat:
                    heartbeat(f"  {what}: {time.monotonic() - started:.0f} s ...")
            except BaseException:
                process.kill()
                process.wait()
                raise
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise BinaryBuildError(
            f"{what} failed (exit {process.returncode}): {' '.join(command)}\n{stderr[-4000:]}"
        )
    return stdout


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog=BUILD_COMMAND,
        description=(
            "Build (or reuse) the test control plane's binaries: kube-apiserver, "
            f"kube-controller-manager and kube-scheduler {KUBERNETES_VERSION} and etcd "
            f"{ETCD_VERSION}, built with "
            "this machine's Go from the Go module proxy. Cached per machine under "
            "$TRAINOP_CACHE_DIR (default ~/.cache/trainop); prints where they are."
        ),
    )
    parser.add_argument("--check", action="store_true", help="do not build; exit 1 if missing")
    parser.add_argument("--json", action="store_true", help="print the paths as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        binaries = kubernetes_binaries(build=not args.check)
    except BinaryBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    paths = {
        "etcd": str(binaries.etcd),
        "kube-apiserver": str(binaries.kube_apiserver),
        "kube-controller-manager": str(binaries.kube_controller_manager),
        "kube-scheduler": str(binaries.kube_scheduler),
    }
    if args.json:
        print(json.dumps(paths, indent=2))
    else:
        for name, path in paths.items():
            print(f"{name}: {path}")
        _stderr(f"ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
