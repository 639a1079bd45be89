"""Upstream's in-memory defaulting: policies, replica counts, keys and the default port."""

from __future__ import annotations

import pytest
from builders import make_job, minimal_job

from trainop_core.api.defaults import apply_defaults
from trainop_core.api.load import load_job
from trainop_core.api.types import CleanPodPolicy, RestartPolicy
from trainop_core.kinds.base import Kind
from trainop_core.kinds.table import KindRegistry

UPSTREAM = [
    pytest.param("TFJob", RestartPolicy.NEVER, "tfjob-port", 2222, id="TFJob: Never, 2222"),
    pytest.param(
        "PyTorchJob", RestartPolicy.ON_FAILURE, "pytorchjob-port", 23456,
        id="PyTorchJob: OnFailure, 23456",
    ),
    pytest.param("MXJob", RestartPolicy.NEVER, "mxjob-port", 9091, id="MXJob: Never, 9091"),
    pytest.param(
        "XGBoostJob", RestartPolicy.NEVER, "xgboostjob-port", 9999, id="XGBoostJob: Never, 9999"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("kind_name", "restart", "port_name", "port"), UPSTREAM)
def test_each_kind_gets_upstreams_defaults(
    registry: KindRegistry, kind_name: str, restart: RestartPolicy, port_name: str, port: int
) -> None:
    kind = registry.get(kind_name)
    job = load_job(minimal_job(kind_name).replica("Worker", None).build(), registry=registry)
    defaulted = apply_defaults(job, kind)
    assert defaulted.spec.run_policy.clean_pod_policy == CleanPodPolicy.NONE
    for spec in defaulted.spec.replica_specs.values():
        assert (spec.replicas, spec.restart_policy) == (1, restart)
        [container] = spec.template["spec"]["containers"]
        assert container["ports"] == [{"name": port_name, "containerPort": port}]


def test_defaulting_returns_a_copy_and_leaves_the_job_alone(registry: KindRegistry) -> None:
    job = load_job(minimal_job("PyTorchJob").build(), registry=registry)
    before = job.to_dict()
    apply_defaults(job, registry.get("PyTorchJob"))
    assert job.to_dict() == before


@pytest.mark.parametrize("kind_name", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob"])
def test_defaulting_twice_changes_nothing(registry: KindRegistry, kind_name: str) -> None:
    kind = registry.get(kind_name)
    once = apply_defaults(load_job(minimal_job(kind_name).build(), registry=registry), kind)
    assert apply_defaults(once, kind).to_dict() == once.to_dict()


def test_replica_type_keys_are_case_normalised_in_order(registry: KindRegistry) -> None:
    job = load_job(make_job("TFJob").replica("ps").replica("worker").build(), registry=registry)
    defaulted = apply_defaults(job, registry.get("TFJob"))
    assert list(defaulted.spec.replica_specs) == ["PS", "Worker"]


def test_clashing_keys_are_left_for_validation_to_report(registry: KindRegistry) -> None:
    job = load_job(make_job("TFJob").replica("Worker").replica("worker").build(), registry=registry)
    defaulted = apply_defaults(job, registry.get("TFJob"))
    assert list(defaulted.spec.replica_specs) == ["Worker", "worker"]


def test_unknown_replica_types_keep_their_spelling(registry: KindRegistry) -> None:
    job = load_job(make_job("TFJob").replica("Trainer").build(), registry=registry)
    assert list(apply_defaults(job, registry.get("TFJob")).spec.replica_specs) == ["Trainer"]


def test_explicit_values_are_kept(registry: KindRegistry) -> None:
    data = (
        make_job("PyTorchJob")
        .master(restart_policy="ExitCode")
        .workers(0)
        .run_policy(cleanPodPolicy="All")
        .container("Master", ports=[{"name": "pytorchjob-port", "containerPort": 29500}])
        .build()
    )
    defaulted = apply_defaults(load_job(data, registry=registry), registry.get("PyTorchJob"))
    master = defaulted.spec.replica_specs["Master"]
    assert master.restart_policy == RestartPolicy.EXIT_CODE
    assert master.template["spec"]["containers"][0]["ports"] == [
        {"name": "pytorchjob-port", "containerPort": 29500}
    ]
    assert defaulted.spec.replica_specs["Worker"].replicas == 0
    assert defaulted.spec.run_policy.clean_pod_policy == CleanPodPolicy.ALL


@pytest.mark.parametrize(
    ("names", "gets_port"),
    [
        pytest.param(
            ["sidecar", "pytorch"], "pytorch", id="the container named pytorch gets the port"
        ),
        pytest.param(["main", "sidecar"], "main", id="without one the first container gets it"),
    ],
)
def test_the_default_port_goes_to_the_default_container(
    registry: KindRegistry, kinds: dict[str, Kind], names: list[str], gets_port: str
) -> None:
    builder = make_job("PyTorchJob").workers().container("Worker", name=names[0])
    builder.add_container("Worker", name=names[1], image="i")
    job = load_job(builder.build(), registry=registry)
    defaulted = apply_defaults(job, kinds["PyTorchJob"])
    listed = defaulted.spec.replica_specs["Worker"].template["spec"]["containers"]
    assert [c["name"] for c in listed if "ports" in c] == [gets_port]


def test_other_ports_are_kept_and_the_default_port_is_added(registry: KindRegistry) -> None:
    data = minimal_job("XGBoostJob").container("Master", ports=[{"containerPort": 80}]).build()
    defaulted = apply_defaults(load_job(data, registry=registry), registry.get("XGBoostJob"))
    ports = defaulted.spec.replica_specs["Master"].template["spec"]["containers"][0]["ports"]
    assert ports == [{"containerPort": 80}, {"name": "xgboostjob-port", "containerPort": 9999}]


def test_kind_extras_run_after_the_common_defaults(registry: KindRegistry) -> None:
    job = load_job(minimal_job("PyTorchJob").build(), registry=registry)
    defaulted = apply_defaults(job, registry.get("PyTorchJob"))
    assert defaulted.to_dict()["spec"]["nprocPerNode"] == "auto"
