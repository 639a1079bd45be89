"""The API server's own bounds and pod rules, and the run-policy consistency upstream lacks: each
is refused at validation with its field path, before any backend sees the job."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from builders import JobBuilder, make_job, minimal_job

from trainop_core.api.validation import prepare
from trainop_core.errors import InvalidJobError

W = "spec.tfReplicaSpecs.Worker.template.spec"


def tf() -> JobBuilder:
    return minimal_job("TFJob", "bounds")


def problems(builder: JobBuilder | dict[str, Any]) -> str:
    data = builder.build() if isinstance(builder, JobBuilder) else builder
    with pytest.raises(InvalidJobError) as caught:
        prepare(data)
    return str(caught.value)


CASES = [
    (tf().workers(2**31), "spec.tfReplicaSpecs.Worker.replicas: must be at most 2147483647"),
    (
        tf().run_policy(ttlSecondsAfterFinished=10**23),
        "spec.runPolicy.ttlSecondsAfterFinished: must be at most 2147483647 (a 32-bit integer)",
    ),
    (
        tf().run_policy(activeDeadlineSeconds=2**63),
        "spec.runPolicy.activeDeadlineSeconds: must be at most 9223372036854775807",
    ),
    (tf().run_policy(backoffLimit=2**40), "spec.runPolicy.backoffLimit: must be at most"),
    (
        tf().run_policy(schedulingPolicy={"scheduleTimeoutSeconds": 2**31}),
        "scheduleTimeoutSeconds: must be at most 2147483647",
    ),
    (
        tf().set("spec.tfReplicaSpecs.Worker.template.spec.terminationGracePeriodSeconds", 2**64),
        f"{W}.terminationGracePeriodSeconds: must be at most 9223372036854775807",
    ),
    (
        tf().set("spec.tfReplicaSpecs.Worker.template.spec.priority", 2**31),
        f"{W}.priority: must be at most 2147483647 (a 32-bit integer)",
    ),
    (
        tf().container("Worker", ports=[{"containerPort": 70000}]),
        f"{W}.containers[0].ports[0].containerPort: must be a port number from 1 to 65535",
    ),
    (
        tf().container("Worker", ports=[{"containerPort": 0}]),
        "containerPort: must be a port number from 1 to 65535, got 0",
    ),
    (
        tf().container("Worker", ports=[{"containerPort": 80, "hostPort": 65536}]),
        f"{W}.containers[0].ports[0].hostPort: must be a port number from 1 to 65535",
    ),
    (
        tf().container("Worker", ports=[{"containerPort": 80, "protocol": "ICMP"}]),
        f"{W}.containers[0].ports[0].protocol: expected one of TCP, UDP, SCTP",
    ),
    (
        tf().container("Worker", ports=[{"containerPort": 80, "name": "a-very-long-port-name"}]),
        "is not a valid port name",
    ),
    (
        tf().container(
            "Worker",
            ports=[{"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}],
        ),
        f"{W}.containers[0].ports[1].name: duplicates {W}.containers[0].ports[0].name",
    ),
    (
        tf().add_container("Worker", name="tensorflow", image="x"),
        f"{W}.containers[1].name: duplicates {W}.containers[0].name",
    ),
    (
        tf().set(
            "spec.tfReplicaSpecs.Worker.template.spec.initContainers",
            [{"name": "tensorflow", "image": "x"}],
        ),
        f"{W}.initContainers[0].name: duplicates {W}.containers[0].name",
    ),
    (
        tf().add_container("Worker", name="Side_Car", image="x"),
        f'{W}.containers[1].name: "Side_Car" is not a valid DNS label',
    ),
    (
        tf().container("Worker", env=[{"name": "A=B", "value": "x"}]),
        f"{W}.containers[0].env[0].name: \"A=B\": an env name is printable ASCII without '='",
    ),
    (
        tf().container("Worker", env=[{"name": "A\x00", "value": "x"}]),
        "an env name is printable ASCII",
    ),
    (
        tf().set(
            "spec.tfReplicaSpecs.Worker.template.spec.volumes",
            [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}],
        ),
        f"{W}.volumes[1].name: duplicates {W}.volumes[0].name",
    ),
    (
        tf().container("Worker", volumeMounts=[{"name": "nowhere", "mountPath": "/x"}]),
        f'{W}.containers[0].volumeMounts[0].name: "nowhere" names no volume of this pod',
    ),
    (
        tf().container("Worker", resources={"limits": {"cpu": float("inf")}}),
        f"{W}.containers[0].resources.limits.cpu: expected a finite number, got inf",
    ),
    (
        tf().run_policy(schedulingPolicy={"minAvailable": 3}),
        "spec.runPolicy.schedulingPolicy.minAvailable: is 3 but the job has 1 replica(s) in all",
    ),
    (
        make_job("PyTorchJob", "el")
        .workers(2)
        .spec(elasticPolicy={"minReplicas": 4, "maxReplicas": 2}),
        "spec.elasticPolicy.minReplicas: is 4, more than maxReplicas (2)",
    ),
    (
        make_job("PyTorchJob", "el").workers(2).spec(elasticPolicy={"maxReplicas": 2**31}),
        "spec.elasticPolicy.maxReplicas: must be at most 2147483647",
    ),
    (
        make_job("PyTorchJob", "np").workers(1).spec(nprocPerNode="²"),
        "spec.nprocPerNode: must be auto, cpu, gpu or an integer",
    ),
    (
        make_job("PyTorchJob", "np").workers(1).spec(nprocPerNode="9" * 5000),
        "spec.nprocPerNode: must be auto, cpu, gpu or an integer",
    ),
    (
        tf().replica("../../etc", 1),
        'spec.tfReplicaSpecs[../../etc]: replica type "../../etc" cannot name pods',
    ),
]
IDS = [
    "replicas beyond an int32",
    "a TTL of 10**23 seconds",
    "an activeDeadlineSeconds beyond an int64",
    "a backoffLimit beyond an int32",
    "a scheduleTimeoutSeconds beyond an int32",
    "a pod's termination grace beyond an int64",
    "a pod priority beyond an int32",
    "a container port above 65535",
    "a container port of 0",
    "a host port above 65535",
    "an unknown port protocol",
    "a port name longer than 15 characters",
    "two ports of one container with the same name",
    "two containers with the same name",
    "an init container named like a container",
    "a container name that is not a DNS label",
    "an env name with an equals sign",
    "an env name with a NUL",
    "two volumes with the same name",
    "a volume mount of no volume",
    "an infinite quantity",
    "a gang larger than the job",
    "elastic minReplicas above maxReplicas",
    "elastic maxReplicas beyond an int32",
    "a unicode digit as nprocPerNode",
    "an nprocPerNode of 5000 digits",
    "a replica type that would make pod names paths",
]


@pytest.mark.parametrize(("job", "expected"), CASES, ids=IDS)
def test_the_api_servers_bounds_are_enforced_with_the_field_path(
    job: JobBuilder, expected: str
) -> None:
    assert expected in problems(job)


def test_values_at_the_bounds_are_accepted() -> None:
    job = (
        tf()
        .workers(3)
        .run_policy(
            ttlSecondsAfterFinished=2**31 - 1,
            activeDeadlineSeconds=2**63 - 1,
            backoffLimit=2**31 - 1,
            schedulingPolicy={"minAvailable": 3},
        )
        .container("Worker", ports=[{"containerPort": 65535, "hostPort": 0, "name": "p-1"}])
    )
    assert prepare(job.build())[1].spec.run_policy.active_deadline_seconds == 2**63 - 1


def test_every_example_and_default_port_name_stays_valid() -> None:
    for kind in ("TFJob", "PyTorchJob", "MXJob", "XGBoostJob"):
        prepare(minimal_job(kind).build())  # the defaulted port names are IANA service names


def test_the_planner_counts_an_int64_deadline_without_overflowing() -> None:
    from trainop_core.planner.lifecycle import seconds_left

    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    now = start + timedelta(seconds=30)
    assert seconds_left(2**63 - 1, start, now) > 1e18  # start + timedelta(...) overflows
    assert seconds_left(100, start, now) == 70


def test_an_infinite_number_written_in_yaml_is_refused() -> None:
    text = tf().container("Worker", resources={"limits": {"cpu": "INFINITE"}}).yaml()
    assert "limits.cpu: expected a finite number, got inf" in problems_of_text(
        text.replace("INFINITE", ".inf")
    )


def problems_of_text(text: str) -> str:
    with pytest.raises(InvalidJobError) as caught:
        prepare(text)
    return str(caught.value)
