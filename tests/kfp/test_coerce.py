"""KFP hands dict parameters over as protobuf Structs: every number a double. The job's schema
says which of them were integers; only those are turned back."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_job
from trainop_kfp.coerce import coerce_ints
from trainop_kfp.runner import prepare_job

from trainop_core.api.load import default_registry, load_job


def floated(value: Any) -> Any:
    """What a Struct round trip does to a value: ints become floats, bools stay bools."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {key: floated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [floated(item) for item in value]
    return value


def at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


POD = "spec.pytorchReplicaSpecs.Worker.template.spec"
RICH_JOB = (
    make_job("PyTorchJob", "rich")
    .master(command=["python", "train.py"])
    .workers(3, command=["python", "train.py", "--lr", "1.0"])
    .run_policy(backoffLimit=2, activeDeadlineSeconds=600,
                schedulingPolicy={"minAvailable": 4, "minResources": {"cpu": 1}})
    .spec(elasticPolicy={"minReplicas": 1, "maxReplicas": 4, "rdzvPort": 29400})
    .container("Worker", ports=[{"containerPort": 23456, "name": "pytorchjob-port"}],
               resources={"limits": {"cpu": 2, "memory": "4Gi"}},
               livenessProbe={"tcpSocket": {"port": 23456}, "periodSeconds": 10})
    .set(f"{POD}.tolerations", [{"key": "gpu", "operator": "Exists", "tolerationSeconds": 300}])
    .set(f"{POD}.terminationGracePeriodSeconds", 30)
    .build()
)  # fmt: skip


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("spec.pytorchReplicaSpecs.Worker.replicas", 3),
        ("spec.runPolicy.backoffLimit", 2),
        ("spec.runPolicy.activeDeadlineSeconds", 600),
        ("spec.runPolicy.schedulingPolicy.minAvailable", 4),
        ("spec.elasticPolicy.rdzvPort", 29400),
        (f"{POD}.containers.0.ports.0.containerPort", 23456),
        (f"{POD}.containers.0.livenessProbe.tcpSocket.port", 23456),
        (f"{POD}.containers.0.livenessProbe.periodSeconds", 10),
        (f"{POD}.containers.0.resources.limits.cpu", 2),
        (f"{POD}.tolerations.0.tolerationSeconds", 300),
        (f"{POD}.terminationGracePeriodSeconds", 30),
    ],
    ids=lambda value: str(value) if isinstance(value, str) else "",
)
def test_a_field_the_schema_types_as_int_is_an_int_again(path: str, expected: int) -> None:
    model = default_registry().get("PyTorchJob").job_model

    coerced = coerce_ints(floated(RICH_JOB), model)

    assert at(coerced, path) == expected
    assert type(at(coerced, path)) is int


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.runPolicy.schedulingPolicy.minResources.cpu", 1.0),  # typed str | int | float
        (f"{POD}.containers.0.args.1", "1.0"),  # text stays text: `--lr 1.0`
    ],
    ids=["a number field that allows floats keeps its float", "an arg string is untouched"],
)
def test_values_the_schema_does_not_type_as_int_are_left_alone(path: str, value: Any) -> None:
    job = make_job("PyTorchJob", "j").workers(1, command=["t"]).build()
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minResources": {"cpu": 1.0}}}
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = [
        "--lr",
        "1.0",
    ]
    model = default_registry().get("PyTorchJob").job_model

    assert at(coerce_ints(job, model), path) == value
    assert type(at(coerce_ints(job, model), path)) is type(value)


def test_a_fractional_value_in_an_int_field_is_kept_for_validation_to_report() -> None:
    job = floated(make_job("PyTorchJob", "j").workers(2, command=["t"]).build())
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2.5

    coerced = prepare_job(job)

    assert coerced["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2.5


@pytest.mark.parametrize(
    "kind", ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "JAXJob", "PaddleJob", "MPIJob"]
)
def test_every_kind_loads_strictly_after_a_struct_round_trip(kind: str) -> None:
    wire = {"replica_field": "jaxReplicaSpecs", "container": "jax"} if kind == "JAXJob" else {}
    builder = make_job(kind, "roundtrip", **wire).run_policy(backoffLimit=3)
    job = builder.workers(2, command=["python", "train.py"]).build()
    if kind == "MPIJob":  # a struct turns every number into a float: slotsPerWorker too
        job = builder.replica("Launcher", 1, command=["mpirun"]).spec(slotsPerWorker=2).build()
    if kind == "MXJob":
        job = make_job(kind, "roundtrip").scheduler(command=["s"]).servers(1, command=["s"])
        job = job.workers(2, command=["w"]).run_policy(backoffLimit=3).build()

    loaded = load_job(prepare_job(floated(job)))

    assert loaded.spec.run_policy.backoff_limit == 3
    assert {t: s.replicas for t, s in loaded.spec.replica_specs.items()}["Worker"] == 2
    if kind == "MPIJob":
        assert loaded.spec.slots_per_worker == 2  # type: ignore[attr-defined]  # MPIJobSpec's
