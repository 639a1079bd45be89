"""How the binaries are built and cached (trainop_core.testing.binaries), with a scripted `go`.

The real build (minutes) runs once per machine in scripts/check, and every control-plane test
uses its output; here a stand-in `go` on PATH records what it is asked and writes executables,
so the cache, lock, atomic rename, errors and the generated module are checked in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trainop_core.testing import binaries
from trainop_core.testing.binaries import BUILD_COMMAND, BinaryBuildError, build_go_packages
from trainop_core.testing.builders import wait_for

FAKE_GO = """\
#!{python}
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    env = {{k: os.environ.get(k) for k in ("GOEXPERIMENT", "GOTOOLCHAIN", "CGO_ENABLED")}}
    log.write(json.dumps({{"args": args, "cwd": os.getcwd(), "env": env}}) + "\\n")
if args[:2] == ["env", "GOVERSION"]:
    print(os.environ.get("FAKE_GO_VERSION", "go1.26.8"))
elif args[:2] == ["mod", "download"]:
    print(json.dumps({{"GoMod": "/published/go.mod"}}))
elif args[:2] == ["mod", "edit"]:
    print(os.environ["FAKE_GO_MOD_JSON"])
elif args[0] == "build":
    out = args[args.index("-o") + 1]
    for package in args[args.index("-o") + 2:]:
        elements = package.split("/")  # go's naming: example.com/cmd/v3 builds "cmd"
        name = elements[-2] if len(elements) > 1 and elements[-1] in ("v2", "v3") else elements[-1]
        path = os.path.join(out, name)
        with open(path, "w") as binary:
            binary.write("#!/bin/sh\\n")
        os.chmod(path, 0o755)
    time.sleep(float(os.environ.get("FAKE_GO_BUILD_SECONDS", "0")))
    if os.environ.get("FAKE_GO_FAIL"):
        sys.exit("compile error: boom")
"""

PUBLISHED_GO_MOD = {
    "Go": "1.26.0",
    "Godebug": [{"Key": "default", "Value": "go1.26"}],
    "Replace": [
        {"Old": {"Path": "example.com/staging/api"}, "New": {"Path": "./staging/src/api"}},
        {"Old": {"Path": "example.com/fork"}, "New": {"Path": "example.com/fork", "Version": "v9"}},
    ],
}
MODULE, PACKAGES = "example.com/tool", ["example.com/tool/cmd/alpha", "example.com/tool/cmd/beta"]


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scripted `go` first on PATH and an empty cache; returns the log of its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO.format(python=sys.executable))
    go.chmod(0o755)
    log = tmp_path / "go.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRAINOP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    monkeypatch.setenv("FAKE_GO_MOD_JSON", json.dumps(PUBLISHED_GO_MOD))
    monkeypatch.delenv("GOEXPERIMENT", raising=False)
    return log


def go_calls(log: Path, verb: str = "build") -> list[dict[str, Any]]:
    if not log.exists():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [c for c in calls if c["args"][0] == verb]


def build(version: str = "v1.2.3", **kwargs: Any) -> dict[str, Path]:
    return build_go_packages(
        MODULE,
        version,
        PACKAGES,
        pin_local_replaces=lambda _: "v0.2.3",
        log=lambda _: None,
        **kwargs,
    )


def test_kubernetes_staging_modules_pin_to_the_matching_v0_tag() -> None:
    assert binaries.staging_pin("v1.36.3")("k8s.io/api") == "v0.36.3"
    with pytest.raises(BinaryBuildError, match=r"v1\.Y\.Z"):
        binaries.staging_pin("v2.0.0")


ETCD_GO_MOD = {
    "Go": "1.26.0",
    "Replace": [
        {"Old": {"Path": "go.etcd.io/etcd/api/v3"}, "New": {"Path": "../api"}},
        {"Old": {"Path": "go.etcd.io/etcd/client/v3"}, "New": {"Path": "../client/v3"}},
        {"Old": {"Path": "go.etcd.io/etcd"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
    ],
}


def test_etcd_is_a_3_6_release_built_from_its_module_with_its_siblings_at_the_same_tag(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_MOD_JSON", json.dumps(ETCD_GO_MOD))

    etcd = binaries.etcd_binary()

    assert binaries.ETCD_VERSION.startswith("v3.6.")  # the line Kubernetes 1.36 is released with
    assert etcd.name == "server" and os.access(etcd, os.X_OK)  # go build's name for server/v3
    (call,) = go_calls(fake_go)
    assert call["args"][-1] == "go.etcd.io/etcd/server/v3"
    go_mod = (Path(call["cwd"]) / "go.mod").read_text().splitlines()
    assert f"require go.etcd.io/etcd/server/v3 {binaries.ETCD_VERSION}" in go_mod
    for sibling in ("api/v3", "client/v3"):
        module = f"go.etcd.io/etcd/{sibling}"
        assert f"replace {module} => {module} {binaries.ETCD_VERSION}" in go_mod
    assert not [line for line in go_mod if "FORBIDDEN" in line or "etcd =>" in line]
    assert binaries.etcd_binary(build=False) == etcd  # cached per machine


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("go.etcd.io/etcd/server/v3", "server"),
        ("example.com/cmd/tool/v12", "tool"),
        ("example.com/cmd/v1", "v1"),  # v1 is no major-version suffix
    ],
)
def test_a_binary_is_named_as_go_build_names_it(package: str, name: str) -> None:
    assert binaries.binary_name(package) == name


def test_one_build_of_every_package_then_the_cache(fake_go: Path) -> None:
    built = build(link_variables={"example.com/tool/version.v": "1.2.3"})
    assert set(built) == {"alpha", "beta"}
    assert all(os.access(path, os.X_OK) for path in built.values())
    (call,) = go_calls(fake_go)
    assert call["args"][-2:] == PACKAGES  # both in one go build
    assert "-trimpath" in call["args"]
    assert "-ldflags=-s -w -X example.com/tool/version.v=1.2.3" in call["args"]
    assert call["env"] == {"GOEXPERIMENT": "nojsonv2", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    go_mod = (Path(call["cwd"]) / "go.mod").read_text()
    for line in (
        "go 1.26.0",
        "godebug default=go1.26",
        f"require {MODULE} v1.2.3",
        f"tool {PACKAGES[0]}",
        "replace example.com/staging/api => example.com/staging/api v0.2.3",
        "replace example.com/fork => example.com/fork v9",
    ):
        assert line in go_mod.splitlines()
    assert build() != built  # other link variables: another recipe, built anew
    assert build(link_variables={"example.com/tool/version.v": "1.2.3"}) == built
    assert len(go_calls(fake_go)) == 2


def test_a_version_bump_builds_again(fake_go: Path) -> None:
    first, second = build("v1.2.3"), build("v1.2.4")
    assert first["alpha"].parent != second["alpha"].parent
    assert len(go_calls(fake_go)) == 2
    assert build("v1.2.3", build=False) == first


def test_without_build_missing_binaries_name_the_build_command(fake_go: Path) -> None:
    with pytest.raises(BinaryBuildError) as missing:
        build(build=False)
    assert BUILD_COMMAND in str(missing.value) and "v1.2.3" in str(missing.value)
    assert go_calls(fake_go) == []


def test_a_failed_build_is_an_error_and_leaves_nothing_that_looks_built(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    with pytest.raises(BinaryBuildError) as failed:
        build()
    assert "go build failed" in str(failed.value) and "compile error: boom" in str(failed.value)
    with pytest.raises(BinaryBuildError, match="not built"):
        build(build=False)


def test_a_killed_build_leaves_nothing_that_looks_built(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_BUILD_SECONDS", "60")  # binaries written, then the build "runs"
    code = textwrap.dedent(
        f"""
        from trainop_core.testing.binaries import build_go_packages
        build_go_packages({MODULE!r}, "v1.2.3", {PACKAGES!r}, pin_local_replaces=lambda _: "v0")
        """
    )
    builder = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        wait_for(lambda: go_calls(fake_go), timeout=30)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait()
    with pytest.raises(BinaryBuildError, match="not built"):
        build(build=False)
    monkeypatch.setenv("FAKE_GO_BUILD_SECONDS", "0")
    built = build()
    leftovers = [p.name for p in built["alpha"].parent.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the next build swept the killed one's staging directory


def test_two_concurrent_runs_build_once(fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GO_BUILD_SECONDS", "2")
    code = textwrap.dedent(
        f"""
        from trainop_core.testing.binaries import build_go_packages
        paths = build_go_packages(
            {MODULE!r}, "v1.2.3", {PACKAGES!r}, pin_local_replaces=lambda _: "v0"
        )
        print(paths["alpha"])
        """
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=60)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs[0] == outputs[1] and Path(outputs[0]).is_file()
    assert len(go_calls(fake_go)) == 1


@pytest.mark.parametrize(
    ("go_version", "experiments_before", "experiments_after"),
    [
        ("go1.26.8", "", "nojsonv2"),
        ("go1.27.0", "", "nojsonv2"),
        ("go1.27.0", "jsonv2,foo", "foo,nojsonv2"),
    ],
    ids=[
        "go 1.26 builds with nojsonv2",
        "go 1.27 (jsonv2 on by default) builds with nojsonv2",
        "an explicit jsonv2 is replaced, other experiments kept",
    ],
)
def test_the_json_v2_experiment_is_off(
    fake_go: Path,
    monkeypatch: pytest.MonkeyPatch,
    go_version: str,
    experiments_before: str,
    experiments_after: str,
) -> None:
    monkeypatch.setenv("FAKE_GO_VERSION", go_version)
    monkeypatch.setenv("GOEXPERIMENT", experiments_before)
    build()
    (call,) = go_calls(fake_go)
    assert call["env"]["GOEXPERIMENT"] == experiments_after


def test_an_old_go_is_refused(fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GO_VERSION", "go1.22.1")
    with pytest.raises(BinaryBuildError, match="too old"):
        build()


def test_a_local_replace_without_a_pin_is_an_error(fake_go: Path) -> None:
    with pytest.raises(BinaryBuildError, match=r"local path \./staging/src/api"):
        build_go_packages(MODULE, "v1.2.3", PACKAGES, log=lambda _: None)


def test_the_command_without_go_exits_non_zero_saying_why(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent), TRAINOP_CACHE_DIR=str(tmp_path))
    env.pop("GOROOT", None)
    done = subprocess.run(
        [sys.executable, "-m", "trainop_core.testing.binaries"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "Go is not installed" in done.stderr
