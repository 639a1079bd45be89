"""Kinds as data: the descriptor table, the registry, master roles, defaults, validation extras."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.builders import JobBuilder, make_job
from tests.core._kind_builders import REGISTRY, defaulted, kind_of
from trainop_core.api.load import load_job
from trainop_core.api.types import RestartPolicy
from trainop_core.kinds import jax, pytorch
from trainop_core.kinds.table import build_registry, builtin_kinds

# Reference §2 table: plural, replica types, container, port name/number, restart policy, label.
DESCRIPTORS = [
    ("TFJob", "tfjobs", ("Chief", "Master", "PS", "Worker", "Evaluator"), "tensorflow",
     "tfjob-port", 2222, RestartPolicy.NEVER, "tensorflow", None),
    ("PyTorchJob", "pytorchjobs", ("Master", "Worker"), "pytorch",
     "pytorchjob-port", 23456, RestartPolicy.ON_FAILURE, "pytorch", "Worker"),
    ("MXJob", "mxjobs", ("Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"),
     "mxnet", "mxjob-port", 9091, RestartPolicy.NEVER, "mxnet", None),
    ("XGBoostJob", "xgboostjobs", ("Master", "Worker"), "xgboost",
     "xgboostjob-port", 9999, RestartPolicy.NEVER, "xgboost", None),
    ("JAXJob", "jaxjobs", ("Worker",), "jax", "jaxjob-port", 6666, RestartPolicy.NEVER, "jax",
     "Worker"),
    ("PaddleJob", "paddlejobs", ("Master", "Worker"), "paddle", "master", 36543,
     RestartPolicy.ON_FAILURE, "paddle", "Worker"),
    ("MPIJob", "mpijobs", ("Launcher", "Worker"), "mpi", "mpi-port", 9999, RestartPolicy.NEVER,
     "mpi", None),
]  # fmt: skip


@pytest.mark.parametrize("row", DESCRIPTORS, ids=[f"{r[0]} matches upstream" for r in DESCRIPTORS])
def test_each_kind_describes_itself_as_upstream(row: tuple[object, ...]) -> None:
    kind = kind_of(str(row[0]))
    actual = (
        kind.kind, kind.plural, kind.replica_types, kind.default_container, kind.port_name,
        kind.default_port, kind.default_restart_policy, kind.framework, kind.scale_replica_type,
    )  # fmt: skip
    assert actual == row
    assert kind.controller_name == f"{str(row[0]).lower()}-controller"


# --- registry -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("pytorchjob", "PyTorchJob"), ("TFJOB", "TFJob"), ("MXNetJob", "MXJob"), ("mxjob", "MXJob")],
    ids=[
        "lowercase names are found",
        "uppercase names are found",
        "the MXNetJob alias is stored as MXJob",
        "mxjob is MXJob",
    ],
)
def test_the_registry_finds_kinds_case_insensitively(name: str, expected: str) -> None:
    assert REGISTRY.get(name).kind == expected


def test_an_unknown_kind_is_a_key_error_that_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known kinds: TFJob, PyTorchJob, MXJob, XGBoostJob"):
        REGISTRY.get("LightGBMJob")


def test_select_keeps_only_the_enabled_schemes_and_rejects_unknown_names() -> None:
    assert REGISTRY.select(["tfjob", "XGBoostJob"]).names == ("TFJob", "XGBoostJob")
    assert REGISTRY.select([]).names == REGISTRY.names
    with pytest.raises(ValueError, match="lightgbmjob"):
        REGISTRY.select(["tfjob", "lightgbmjob"])


def test_kinds_are_found_by_resource_plural() -> None:
    assert REGISTRY.for_plural("xgboostjobs").kind == "XGBoostJob"
    with pytest.raises(KeyError):
        REGISTRY.for_plural("lightgbmjobs")


def test_every_build_returns_a_fresh_registry_of_the_one_table() -> None:
    first, second = build_registry(entry_points=False), build_registry(entry_points=False)
    assert first is not second
    assert first.kinds == builtin_kinds()


def test_extra_kinds_join_the_registry_but_may_not_reuse_a_name() -> None:
    custom = dataclasses.replace(jax.KIND, kind="LightGBMJob", plural="lightgbmjobs", aliases=())
    assert build_registry(entry_points=False, extra=[custom]).get("lightgbmjob") is custom
    clash = dataclasses.replace(custom, aliases=("TFJob",))
    with pytest.raises(ValueError, match="tfjob"):
        build_registry(entry_points=False, extra=[clash])


# --- master role ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "replicas", "masters"),
    [
        ("TFJob", {"Chief": 1, "Worker": 2}, {("Chief", 0)}),
        ("TFJob", {"Master": 1, "PS": 1, "Worker": 1}, {("Master", 0)}),
        ("TFJob", {"PS": 1, "Worker": 2}, {("Worker", 0)}),
        ("PyTorchJob", {"Master": 1, "Worker": 2}, {("Master", 0)}),
        ("PyTorchJob", {"Worker": 2}, {("Worker", 0)}),
        ("XGBoostJob", {"Master": 1, "Worker": 2}, {("Master", 0)}),
        ("MXJob", {"Scheduler": 1, "Server": 2, "Worker": 1}, {("Server", 0), ("Server", 1)}),
        ("JAXJob", {"Worker": 3}, {("Worker", 0)}),
        ("PaddleJob", {"Master": 1, "Worker": 2}, {("Master", 0)}),
        ("PaddleJob", {"Worker": 2}, set()),
        ("MPIJob", {"Launcher": 1, "Worker": 2}, {("Launcher", 0)}),
    ],
    ids=[
        "TF chief is the master",
        "TF legacy Master is the master",
        "TF without chief makes worker 0 the master",
        "PyTorch Master is the master",
        "PyTorch worker-only makes worker 0 the master",
        "XGBoost Master is the master",
        "MXNet servers carry the master label (upstream quirk)",
        "JAX worker 0 is the master",
        "Paddle Master is the master",
        "collective Paddle has no master label (upstream)",
        "MPI launcher is the master",
    ],
)
def test_master_role_per_kind(
    kind: str, replicas: dict[str, int], masters: set[tuple[str, int]]
) -> None:
    rule = kind_of(kind).is_master_role
    found = {(rt, i) for rt, n in replicas.items() for i in range(n) if rule(replicas, rt, i)}
    assert found == masters


# --- primary replica (the job's result) -----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "replicas", "primary"),
    [
        ("TFJob", {"Chief": 1, "PS": 1, "Worker": 2}, "chief-0"),
        ("TFJob", {"Master": 1, "Worker": 2}, "master-0"),
        ("TFJob", {"PS": 2, "Worker": 2, "Evaluator": 1}, "worker-0"),
        ("PyTorchJob", {"Master": 1, "Worker": 2}, "master-0"),
        ("PyTorchJob", {"Worker": 3}, "worker-0"),
        ("XGBoostJob", {"Master": 1, "Worker": 2}, "master-0"),
        ("MXJob", {"Scheduler": 1, "Server": 2, "Worker": 2}, "worker-0"),
        ("JAXJob", {"Worker": 3}, "worker-0"),
        ("PaddleJob", {"Master": 1, "Worker": 2}, "worker-0"),
        ("MPIJob", {"Launcher": 1, "Worker": 2}, "launcher-0"),
    ],
    ids=[
        "TF chief's output is the result",
        "TF legacy Master's output is the result",
        "TF without chief or master takes worker 0",
        "PyTorch master's output is the result",
        "PyTorch worker-only takes worker 0",
        "XGBoost master's output is the result",
        "MXNet worker 0 is the result, not a parameter server",
        "JAX worker 0 is the result",
        "Paddle worker 0 is the result, not the parameter server",
        "MPI launcher's output (every rank's, through mpirun) is the result",
    ],
)
def test_primary_replica_per_kind(kind: str, replicas: dict[str, int], primary: str) -> None:
    from trainop_core.client import primary_replica

    wire = {"replica_field": "jaxReplicaSpecs", "container": "jax"} if kind == "JAXJob" else {}
    builder = make_job(kind, **wire)
    for rtype, count in replicas.items():
        builder.replica(rtype, count)
    job = defaulted(builder.job())
    assert primary_replica(job) == primary
    rtype, index = kind_of(kind).primary_replica(replicas)  # the same answer from counts alone
    assert f"{rtype.lower()}-{index}" == primary


def test_the_mxnet_primary_is_not_the_replica_with_the_master_label() -> None:
    replicas = {"Scheduler": 1, "Server": 1, "Worker": 2}
    kind = kind_of("MXJob")
    assert kind.is_master_role(replicas, "Server", 0)
    assert kind.primary_replica(replicas) == ("Worker", 0)


# --- defaults -------------------------------------------------------------------------------


def test_tf_success_policy_defaults_to_the_empty_default_policy() -> None:
    job = defaulted(make_job("TFJob").workers(2).job())
    assert job.to_dict()["spec"]["successPolicy"] == ""


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "auto"),
        ({"nprocPerNode": "4"}, "4"),
        ({"elasticPolicy": {"nProcPerNode": 2}}, None),
    ],
    ids=[
        "nprocPerNode defaults to auto",
        "a set nprocPerNode is kept",
        "the deprecated elastic nProcPerNode leaves it unset",
    ],
)
def test_pytorch_nproc_per_node_default(spec: dict[str, object], expected: str | None) -> None:
    job = defaulted(make_job("PyTorchJob").workers(2).spec(**spec).job())
    assert isinstance(job.spec, pytorch.PyTorchJobSpec)
    assert job.spec.nproc_per_node == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [({}, (3, 3)), ({"maxReplicas": 5}, (5, 5)), ({"minReplicas": 2}, (2, 2)),
     ({"minReplicas": 1, "maxReplicas": 4}, (1, 4))],
    ids=["neither bound means the worker count", "only max sets min", "only min sets max",
         "both bounds are kept"],
)  # fmt: skip
def test_pytorch_elastic_bounds_default(policy: dict[str, int], expected: tuple[int, int]) -> None:
    job = defaulted(make_job("PyTorchJob").workers(3).spec(elasticPolicy=policy).job())
    assert isinstance(job.spec, pytorch.PyTorchJobSpec) and job.spec.elastic_policy
    elastic = job.spec.elastic_policy
    assert (elastic.min_replicas, elastic.max_replicas) == expected


# --- validation extras ----------------------------------------------------------------------


def problems(builder_: JobBuilder) -> list[str]:
    job = defaulted(load_job(builder_.build(), registry=REGISTRY))
    return [str(p) for p in kind_of(job.kind).validate(job)]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: make_job("TFJob").chief().master().workers(1), "more than 1 Chief or Master"),
        (lambda: make_job("TFJob").chief(2), "more than 1 Chief or Master"),
        (lambda: make_job("PyTorchJob").master(2).workers(1), "Master.replicas: must be 1"),
        (lambda: make_job("PyTorchJob").master().workers(0), "Worker.replicas: must be at least"),
        (
            lambda: make_job("PyTorchJob").master().spec(elasticPolicy={}),
            "spec.pytorchReplicaSpecs.Worker: is required when spec.elasticPolicy is set",
        ),
        (lambda: make_job("PyTorchJob").workers(1).spec(nprocPerNode="many"), "auto, cpu, gpu"),
        (
            lambda: (
                make_job("PyTorchJob")
                .workers(1)
                .spec(nprocPerNode="2", elasticPolicy={"nProcPerNode": 2})
            ),
            "must not be set together",
        ),
        (lambda: make_job("XGBoostJob").workers(2), "Master: is required"),
        (lambda: make_job("XGBoostJob").master(2).workers(1), "Master.replicas: must be 1"),
        (lambda: make_job("MXJob").scheduler(2).workers(1), "Scheduler.replicas"),
    ],
    ids=[
        "TF rejects a Chief together with a Master",
        "TF rejects two chiefs",
        "PyTorch needs exactly one Master",
        "PyTorch rejects zero workers",
        "PyTorch elastic policy names the missing Worker spec, as upstream",
        "PyTorch nprocPerNode must be auto cpu gpu or a number",
        "PyTorch rejects both nprocPerNode spellings",
        "XGBoost requires a Master",
        "XGBoost needs exactly one Master",
        "MXNet allows at most one Scheduler",
    ],
)
def test_kind_validation_extras(build: Callable[[], JobBuilder], expected: str) -> None:
    found = problems(build())
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_job("TFJob").chief().ps(2).workers(4).evaluator(),
        lambda: make_job("PyTorchJob").master().workers(3).spec(nprocPerNode="gpu"),
        lambda: make_job("PyTorchJob").workers(3).spec(elasticPolicy={"maxReplicas": 4}),
        lambda: make_job("XGBoostJob").master().workers(2),
        lambda: make_job("MXJob").scheduler().servers(2).workers(2),
    ],
    ids=[
        "a full TF topology is valid",
        "PyTorch with gpu nproc is valid",
        "elastic PyTorch is valid",
        "XGBoost master plus workers is valid",
        "MXNet scheduler servers workers is valid",
    ],
)
def test_typical_jobs_have_no_kind_problems(build: Callable[[], JobBuilder]) -> None:
    assert problems(build()) == []
