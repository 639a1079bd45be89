"""The one decorator configuration: read from a file (or $TRAINOP_DECORATORS), every problem at
once with its field path, and built into the planner's in-process decorators."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import make_job
from tests.core._kind_builders import REGISTRY, T0
from trainop_core.api.validation import prepare
from trainop_core.decorators import DecoratorConfig, load_decorator_config
from trainop_core.errors import InvalidConfigError, InvalidJobError
from trainop_core.planner import KubernetesAddressing, Observed, plan

ROOT = Path(__file__).resolve().parents[2]
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "decorators.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def base(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "trainop.kubeflow.org/v1alpha1", "kind": "DecoratorConfiguration",
            **fields}  # fmt: skip


def test_the_example_configuration_loads() -> None:
    config = load_decorator_config(ROOT / "examples" / "decorators" / "decorators.yaml")
    assert [s.name for s in config.servers] == ["site-policy"]
    assert config.servers[0].failure_policy == "Fail"


def test_without_a_file_the_environment_names_one_else_plugins_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINOP_DECORATORS", raising=False)
    assert load_decorator_config() == DecoratorConfig()
    path = write(tmp_path, base(entryPoints=False, decorators=[{"env": {"A": "1"}}]))
    monkeypatch.setenv("TRAINOP_DECORATORS", str(path))
    assert load_decorator_config().decorators[0].env == {"A": "1"}


def test_built_in_decorators_change_every_pod_in_order_and_never_the_env_contract() -> None:
    config = load_decorator_config(base(entryPoints=False, decorators=[
        {"nodeSelector": {"pool": "train"}},
        {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"env": {"SITE": "lab", "RANK": "99"}},
        {"sidecar": {"container": {"name": "shipper", "image": "busybox"},
                     "replicaTypes": ["Worker"]}},
    ]))  # fmt: skip
    kind, job = prepare(make_job("PyTorchJob", "d").master().workers(1).build(), registry=REGISTRY)
    first = plan(job, kind, Observed(), T0, KubernetesAddressing(job, kind),
                 decorators=config.pod_decorators())  # fmt: skip
    by_name = {p["metadata"]["name"]: p["spec"] for p in first.create_pods}
    for name, spec in by_name.items():
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert spec["nodeSelector"] == {"pool": "train"}
        assert env["SITE"] == "lab"
        assert env["RANK"] == ("0" if "master" in name else "1")  # the contract wins
    assert [c["name"] for c in by_name["d-worker-0"]["containers"]] == ["pytorch", "shipper"]
    assert [c["name"] for c in by_name["d-master-0"]["containers"]] == ["pytorch"]


BAD = {
    "an unknown field": ({"servers": [{"name": "a", "url": "https://x", "colour": 1}]},
                         "servers[0].colour"),
    "plain http off this machine": ({"servers": [{"name": "a", "url": "http://policy:80/d"}]},
                                    "servers[0].url"),
    "a URL with a query": ({"servers": [{"name": "a", "url": "https://p/d?x=1"}]},
                           "servers[0].url"),
    "a failure policy out of the enum": (
        {"servers": [{"name": "a", "url": "https://p", "failurePolicy": "Retry"}]},
        "servers[0].failurePolicy"),
    "a timeout over 30 s": ({"servers": [{"name": "a", "url": "https://p", "timeoutSeconds": 60}]},
                           "servers[0].timeoutSeconds"),
    "two servers of one name": (
        {"servers": [{"name": "a", "url": "https://p"}, {"name": "a", "url": "https://q"}]},
        "servers[1].name"),
    "a caBundle that is no PEM": (
        {"servers": [{"name": "a", "url": "https://p", "caBundle": "eA=="}]},
        "servers[0].caBundle"),
    "a selector operator out of the enum": (
        {"servers": [{"name": "a", "url": "https://p", "objectSelector": {
            "matchExpressions": [{"key": "k", "operator": "Near"}]}}]},
        "servers[0].objectSelector.matchExpressions[0].operator"),
    "two decorators in one entry": ({"decorators": [{"env": {"A": "1"}, "nodeSelector": {}}]},
                                    "decorators[0]"),
    "a sidecar that is no container": (
        {"decorators": [{"sidecar": {"container": {"name": "s", "image": 5}}}]},
        "decorators[0].sidecar.container.image"),
    "a wrong kind": ({"kind": "Decorators"}, "kind"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD), ids=lambda c: f"{c} is refused with its field path")
def test_a_bad_configuration_names_the_field(tmp_path: Path, case: str) -> None:
    data, path = BAD[case]
    with pytest.raises(InvalidConfigError) as caught:
        load_decorator_config(write(tmp_path, {**base(), **data}))
    assert path in [p.path for p in caught.value.problems], caught.value
    assert str(tmp_path / "decorators.yaml") in str(caught.value)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    data = base(servers=[{"name": "a", "url": "http://far:80"}, {"name": "a", "url": "ftp://x"}])
    with pytest.raises(InvalidConfigError) as caught:
        load_decorator_config(write(tmp_path, data))
    assert {p.path for p in caught.value.problems} >= {"servers[0].url", "servers[1].url",
                                                        "servers[1].name"}  # fmt: skip


def test_a_relative_ca_file_resolves_next_to_the_configuration(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text(base64.b64decode(CA).decode())
    server = {"name": "a", "url": "https://p", "caFile": "ca.crt"}
    config = load_decorator_config(write(tmp_path, base(servers=[server])))
    assert config.servers[0].ca_file == str(tmp_path / "ca.crt")
    with pytest.raises(InvalidConfigError, match=r"servers\[0\].caFile"):
        load_decorator_config(write(tmp_path, base(servers=[{**server, "caFile": "nope.crt"}])))


def test_hostile_files_meet_the_job_readers_bounds(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="nest"):
        load_decorator_config(write(tmp_path, "a: " + "[" * 200 + "]" * 200))
    with pytest.raises(InvalidJobError, match=r"no such file|cannot be read|does not exist"):
        load_decorator_config(tmp_path / "missing.yaml")
