"""`trainop render --decorators`: the pods shown are decorated exactly as the operator decorates
them (in-process decorators, then decorator servers), and a failing server is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from decorator_servers import POOL_ENV, POOL_LABEL, config_file, policy_server, refusing

from tests.builders import make_job
from tests.core.test_render import run_render


def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(make_job("PyTorchJob", "mnist").master().workers(2).yaml())
    return path


def pods(out: str) -> dict[str, dict[str, Any]]:
    items = yaml.safe_load(out)["items"]
    return {i["metadata"]["name"]: i for i in items if i["kind"] == "Pod"}


def test_render_shows_the_decorated_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with policy_server() as server:
        config = config_file(tmp_path, server)
        assert run_render([str(job_file(tmp_path)), "--decorators", str(config)]) == 0
        assert server.calls == 2  # one per replica type
    out = capsys.readouterr().out
    assert "&id" not in out  # every pod has objects of its own: no YAML anchors
    shown = pods(out)
    assert sorted(shown) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    for name, pod in shown.items():
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert (env["SITE"], env[POOL_ENV]) == ("lab", "training")
        assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "training"}
        assert ("log-shipper" in str(pod["spec"]["containers"])) == ("worker" in name)


def test_the_environment_names_the_configuration_render_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with policy_server() as server:
        monkeypatch.setenv("TRAINOP_DECORATORS", str(config_file(tmp_path, server)))
        assert run_render([str(job_file(tmp_path))]) == 0
    assert all(POOL_LABEL in str(p) for p in pods(capsys.readouterr().out).values())


def test_a_server_that_fails_the_job_makes_render_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with policy_server(refusing("no GPUs for you")) as server:
        config = config_file(tmp_path, server)
        assert run_render([str(job_file(tmp_path)), "--decorators", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert 'decorator server "site-policy"' in captured.err and "no GPUs for you" in captured.err


def test_an_ignored_failure_renders_undecorated_pods_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with policy_server() as server:
        config = config_file(tmp_path, server, failurePolicy="Ignore")
        server.stop()  # down
        assert run_render([str(job_file(tmp_path)), "--decorators", str(config)]) == 0
    captured = capsys.readouterr()
    assert POOL_LABEL not in captured.out and "SITE" in captured.out
    assert captured.err.count("warning:") == 2 and "unreachable" not in captured.err
    assert "ConnectionRefusedError" in captured.err


def test_a_bad_configuration_exits_2_with_its_field_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: trainop.kubeflow.org/v1alpha1\nkind: DecoratorConfiguration\n"
                   "servers: [{name: a, url: 'http://far.away/x'}]\n")  # fmt: skip
    assert run_render([str(job_file(tmp_path)), "--decorators", str(bad)]) == 2
    assert "servers[0].url" in capsys.readouterr().err
