"""Helpers for the Ray backend tests: tagged tiny replicas, waiting on conditions, addresses."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from typing import Any

import processes
import pytest
from builders import JobBuilder

TAG = "TRAINOP_TEST_TAG"


def py(code: str) -> list[str]:
    """A replica command: the interpreter trainop puts first on PATH, running `code`."""
    return ["python", "-c", textwrap.dedent(code)]


OK = py("print('done')")
SLEEP = py("import time; time.sleep(120)")


def tagged(builder: JobBuilder, tag: str) -> dict[str, Any]:
    """The job with the test's tag in every replica's env (for the leftover-process check)."""
    data = builder.build()
    for spec in data["spec"][builder.replica_field].values():
        for container in spec["template"]["spec"]["containers"]:
            container.setdefault("env", []).append({"name": TAG, "value": tag})
    return data


def until(condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> Any:
    """Poll `condition` until it returns something true (returned); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        time.sleep(0.1)


def addresses(job: Any) -> dict[str, tuple[str, int]]:
    """replica -> (node IP, port), from the job's `ray.trainop.dev/addresses` annotation."""
    text = (job.metadata.annotations or {}).get("ray.trainop.dev/addresses", "")
    found = {}
    for item in filter(None, text.split(",")):
        replica, _, where = item.partition("=")
        ip, _, port = where.rpartition(":")
        found[replica] = (ip, int(port))
    return found


def assert_on_two_nodes(cluster: Any, where: dict[str, tuple[str, int]]) -> None:
    """The replicas at `where` (from `addresses`) ran on both worker nodes. On the stand-in
    cluster every node has this machine's IP, so that cannot be seen: the test ends skipped,
    saying why, after what it could check (one IP, distinct ports)."""
    ips = {ip for ip, _ in where.values()}
    if cluster.one_ip:
        assert len(ips) == 1, where
        assert len(set(where.values())) == len(where), where  # distinct ports on one IP
        pytest.skip(f"nodes share one IP here, so two nodes cannot be told apart: {cluster.one_ip}")
    assert len(ips) == 2, f"expected replicas on both worker nodes: {where}"


def leftovers(tag: str) -> dict[str, Any]:
    """What of the test's jobs is still there: trainop actors, live placement groups, reserved
    CPUs/GPUs, replica processes carrying `tag` (empty: nothing)."""
    import ray
    from ray.util.placement_group import placement_group_table

    from trainop_core.backends.ray.backend import NAME_PREFIX
    from trainop_core.backends.ray.capacity import SLOT_PREFIX

    named = ray.util.list_named_actors(all_namespaces=True)
    actors = [a for a in named if a["namespace"] == "trainop"]
    # a supervisor's place on the head goes with it: counted as that actor, not on its own
    slots = {SLOT_PREFIX + a["name"][len(NAME_PREFIX) :] for a in actors}
    groups = [
        g
        for g in placement_group_table().values()
        if g["state"] != "REMOVED" and g["name"] not in slots
    ]
    total, free = ray.cluster_resources(), ray.available_resources()
    busy = {
        k: total[k] - free.get(k, 0)
        for k in ("CPU", "GPU")
        if total.get(k, 0) - free.get(k, 0) > 1e-6
    }
    marker = f"{TAG}={tag}".encode()
    found: dict[str, Any] = {
        "actors": actors,
        "placement groups": groups,
        "reserved": busy,
        "processes": processes.live(
            lambda entry: marker in (entry / "environ").read_bytes().split(b"\0")
        ),
    }
    return {k: v for k, v in found.items() if v}


def assert_nothing_left(tag: str, timeout: float = 30.0) -> None:
    """No trainop actor, no live placement group, every resource free, no tagged process."""
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(tag)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"left behind: {left}"
