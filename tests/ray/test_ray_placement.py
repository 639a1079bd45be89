"""The Ray backend's pure parts: bundles and strategy from a job, addresses, the log buffer.
No cluster needed."""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_job

from trainop_core.api.load import default_registry
from trainop_core.backends.ray.addressing import RayAddressing
from trainop_core.backends.ray.logbuffer import LogBuffer, limit_per_replica
from trainop_core.backends.ray.placement import (
    DEFAULT_SCHEDULE_TIMEOUT_SECONDS,
    MAX_BUNDLES,
    distinct_ports,
    placement_for,
)

OK = ["python", "-c", "print(1)"]


def place(builder: Any) -> Any:
    job = builder.job()
    return placement_for(job, default_registry().get(job.kind))


def test_one_bundle_per_replica_in_the_replicas_order_with_one_cpu_by_default() -> None:
    placement, problems = place(make_job("PyTorchJob").workers(2, command=OK).master(command=OK))
    assert problems == []
    assert placement.replicas == ("master-0", "worker-0", "worker-1")
    assert placement.bundles == ({"CPU": 1.0},) * 3
    assert placement.strategy == "PACK"
    assert placement.timeout_seconds == DEFAULT_SCHEDULE_TIMEOUT_SECONDS


def test_a_job_of_a_billion_replicas_is_refused_before_any_bundle_is_listed() -> None:
    placement, problems = place(
        make_job("PyTorchJob").workers(10**9, command=OK).master(command=OK)
    )
    assert placement is None
    assert [p.path for p in problems] == ["spec.pytorchReplicaSpecs"]
    assert f"at most {MAX_BUNDLES}" in problems[0].message


@pytest.mark.parametrize(
    ("resources", "bundle"),
    [
        ({"requests": {"cpu": "500m", "memory": "1Gi"}}, {"CPU": 0.5, "memory": 1024.0**3}),
        ({"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}, {"CPU": 2.0, "GPU": 1.0}),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "4"}}, {"CPU": 1.0}),
        ({"requests": {"memory": "500M"}}, {"CPU": 1.0, "memory": 5e8}),
    ],
    ids=[
        "cpu in millicores and memory in bytes",
        "limits stand in for missing requests, GPUs become Ray GPUs",
        "a request wins over its limit",
        "no cpu request means one CPU",
    ],
)
def test_bundles_come_from_the_default_containers_requests(
    resources: dict[str, Any], bundle: dict[str, float]
) -> None:
    builder = make_job("TFJob").workers(1, command=OK).container("Worker", resources=resources)
    placement, _ = place(builder)
    assert placement.bundles == (bundle,)


def test_init_containers_raise_a_bundle_to_their_largest_request() -> None:
    builder = make_job("TFJob").workers(1, command=OK)
    builder.container("Worker", resources={"requests": {"cpu": "1", "memory": "1Gi"}})
    builder.set(
        "spec.tfReplicaSpecs.Worker.template.spec.initContainers",
        [{"name": "prep", "image": "x", "command": OK, "resources": {"requests": {"cpu": "3"}}}],
    )
    assert place(builder)[0].bundles == ({"CPU": 3.0, "memory": 1024.0**3},)


@pytest.mark.parametrize("strategy", ["SPREAD", "strict_pack", "STRICT_SPREAD"])
def test_the_annotation_picks_the_strategy(strategy: str) -> None:
    builder = make_job("TFJob").workers(2, command=OK)
    builder.set("metadata.annotations", {"ray.trainop.dev/placement-strategy": strategy})
    assert place(builder)[0].strategy == strategy.upper()


def test_schedule_timeout_comes_from_the_scheduling_policy() -> None:
    builder = make_job("TFJob").workers(1, command=OK)
    builder.run_policy(schedulingPolicy={"scheduleTimeoutSeconds": 7})
    assert place(builder)[0].timeout_seconds == 7.0


@pytest.mark.parametrize(
    ("annotations", "field", "message"),
    [
        ({"ray.trainop.dev/placement-strategy": "ANYWHERE"}, "placement-strategy", "expected"),
        ({"ray.trainop.dev/runtime-env": "{not json"}, "runtime-env", "is not JSON"),
        ({"ray.trainop.dev/runtime-env": "[1]"}, "runtime-env", "must be a JSON object"),
        ({"ray.trainop.dev/runtime-env": '{"working_dir": "/"}'}, "runtime-env", "unsupported"),
        (
            {"ray.trainop.dev/runtime-env": '{"py_modules": ["./mine"]}'},
            "runtime-env].py_modules[0]",
            "is a local path",
        ),
        ({"ray.trainop.dev/runtime-env": '{"excludes": "*.bin"}'}, "runtime-env].excludes", "list"),
    ],
    ids=[
        "unknown strategy",
        "runtime env not JSON",
        "runtime env a list",
        "working_dir is ours",
        "a local py_module cannot be shipped",
        "excludes must be a list",
    ],
)
def test_bad_annotations_are_problems_naming_the_field(
    annotations: dict[str, str], field: str, message: str
) -> None:
    builder = make_job("TFJob").workers(1, command=OK)
    builder.set("metadata.annotations", annotations)
    placement, problems = place(builder)
    assert placement is None
    assert len(problems) == 1
    assert problems[0].path == f"metadata.annotations[ray.trainop.dev/{field}" + (
        "" if "]" in field else "]"
    )
    assert message in problems[0].message


def test_placement_describes_itself_for_messages() -> None:
    builder = make_job("PyTorchJob").master(command=OK).workers(2, command=OK)
    builder.container("Master", resources={"requests": {"cpu": "2", "memory": "2Gi"}})
    text = place(builder)[0].describe()
    assert text == "3 bundle(s) {CPU: 2, memory: 2GiB} + {CPU: 1} x2, PACK"


def test_addressing_answers_node_ips_and_probed_ports() -> None:
    addressing = RayAddressing({"master-0": ("10.0.0.2", 4000), "worker-0": ("10.0.0.3", 4001)})
    assert addressing.host("Master", 0) == "10.0.0.2"
    assert addressing.host("Master", 0, fqdn=True) == "10.0.0.2"
    assert addressing.port("Worker", 0) == 4001
    assert not addressing.waits_for_dns
    with pytest.raises(KeyError, match="worker-1 has not been placed"):
        addressing.port("Worker", 1)


def test_replicas_on_one_node_must_not_share_a_port() -> None:
    endpoints = [("a-0", "10.0.0.2", 1), ("b-0", "10.0.0.3", 1), ("c-0", "10.0.0.2", 1)]
    assert distinct_ports(endpoints) == ["c-0"]


def test_the_log_buffer_keeps_the_newest_bytes_and_says_what_was_dropped() -> None:
    buffer = LogBuffer(limit=20)
    buffer.append(b"line one\nline two\n")
    assert buffer.read(0) == (b"line one\nline two\n", 18)
    buffer.append(b"line three\n")  # 29 bytes: the oldest whole line goes
    assert buffer.start == 9
    data, offset = buffer.read(0)
    assert data.startswith(b"\n--- trainop: 9 bytes of older output dropped ---\n")
    assert data.endswith(b"line two\nline three\n") and offset == buffer.end == 29
    assert buffer.read(29) == (b"", 29)


def test_a_large_job_keeps_less_output_per_replica() -> None:
    assert limit_per_replica(4) == 8 * 1024**2
    assert limit_per_replica(64) == 512 * 1024  # 32 MiB in all


@pytest.mark.parametrize("replicas", [1, 4, 64, 512, 513, 4096, 100_000])
def test_a_job_keeps_at_most_32_mib_of_output_whatever_its_replica_count(replicas: int) -> None:
    assert 0 < limit_per_replica(replicas) * replicas <= 32 * 1024**2
