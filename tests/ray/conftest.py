"""Fixtures for the Ray backend: one real multi-node Ray cluster for this package, a client on it,
and checks that a test leaves nothing behind (no job, actor, placement group, reserved resource
or replica process).

The cluster is a head node (no CPUs) and two worker nodes with 2 CPUs each, every worker in a
network namespace of its own with its own IP (see raycluster.py). Where network namespaces
cannot be made (or TRAINOP_RAY_TESTS_ONE_IP is set), `ray.cluster_utils.Cluster` stands in (same
node count, one IP): its `one_ip` says why, and tests that would tell nodes apart by their IPs
check what they can and end skipped with that reason (`ray_helpers.assert_on_two_nodes`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray_helpers import assert_nothing_left  # noqa: E402  (after the importorskip)
from raycluster import (  # noqa: E402
    MARKER,
    NetnsRayCluster,
    available,
    destroy,
    remove_owner,
    start_reaper,
    sweep_stale,
    write_owner,
)

from trainop_core.backends.ray import RayBackend  # noqa: E402
from trainop_core.client import TrainingClient  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKERS, CPUS_PER_WORKER = 2, 2
ONE_IP_ENV = "TRAINOP_RAY_TESTS_ONE_IP"


def _pythonpath() -> str:
    paths = [str(REPO), *(str(REPO / "integrations" / n) for n in ("flyte", "kfp", "hpo"))]
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*paths, *([inherited] if inherited else [])])


LAST = ("test_a_node_killed_mid_job",)  # these kill a node for good: nothing may follow them


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that kill a node after every other test of this package (and still within
    it: the cluster is package-scoped)."""
    here = [i for i, item in enumerate(items) if Path(str(item.path)).parent == HERE]
    if not here:
        return
    last = [items[i] for i in here if any(name in items[i].name for name in LAST)]
    rest = [item for item in items if item not in last]
    end = max(i for i, item in enumerate(rest) if Path(str(item.path)).parent == HERE)
    items[:] = rest[: end + 1] + last + rest[end + 1 :]


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[Any]:
    """The cluster, with this process connected to it as a driver; stopped at the end, also
    when a test failed, and by its reaper if this process dies first. What a crashed earlier run
    left is removed first (see raycluster.py)."""
    why = "TRAINOP_RAY_TESTS_ONE_IP is set" if os.environ.get(ONE_IP_ENV) else available()
    if not why:
        sweep_stale()
    root = Path(tempfile.mkdtemp(prefix="trt-", dir="/tmp"))  # short: Ray's socket paths
    cluster: Any = None
    saved: dict[str, str | None] = {}
    try:
        if why:
            cluster = _fallback_cluster(root, saved)
        else:
            env = {"PYTHONPATH": _pythonpath(), **_auth()}
            saved.update({name: os.environ.get(name) for name in env})
            os.environ.update(env)  # this process connects as a driver: the same token
            _reload_auth_settings()
            cluster = NetnsRayCluster(root, WORKERS, CPUS_PER_WORKER, env)
            cluster.start()
            _connect(cluster.address, root)
            cluster.wait_for_nodes(ray)
        cluster.one_ip = why
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _auth() -> dict[str, str]:
    """Ray 2.60 clusters use token authentication; a driver that names an address sends the
    token only when RAY_AUTH_MODE=token. The nodes and this process get the machine's token
    (~/.ray/auth_token, made if missing, as any local `ray.init()` does) in their env, so a
    later change of that file cannot split them."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray_cli, "get-auth-token", "--generate"], capture_output=True, check=True)
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def _reload_auth_settings() -> None:
    """Ray read RAY_AUTH_MODE when it was imported; make this process see the new values (what
    Ray itself does when `ray.init()` turns token authentication on)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _connect(address: str, root: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            return
        except (ConnectionError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


class _FallbackCluster:
    """`ray.cluster_utils.Cluster` (nodes share one IP) where network namespaces are not allowed;
    its processes carry the same marker, owner record and reaper as the namespaced cluster."""

    def __init__(self, root: Path) -> None:
        from ray.cluster_utils import Cluster

        self.tag = uuid.uuid4().hex[:6]
        self.root = root
        write_owner(self.tag, root)
        self.reaper = start_reaper(self.tag, root)
        os.environ[MARKER] = self.tag  # Ray's processes, started from here, inherit it
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "temp_dir": str(root / "ray")},  # Ray 2.60: temp_dir
        )
        for _ in range(WORKERS):
            self.cluster.add_node(num_cpus=CPUS_PER_WORKER)
        self.address = self.cluster.address

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.cluster.shutdown()
        destroy(self.tag)
        os.environ.pop(MARKER, None)
        self.reaper.kill()
        self.reaper.wait(timeout=30)
        remove_owner(self.tag)


def _fallback_cluster(root: Path, saved: dict[str, str | None]) -> Any:
    saved.update({name: os.environ.get(name) for name in ("PYTHONPATH", "RAY_TMPDIR")})
    os.environ["PYTHONPATH"] = _pythonpath()
    # Cluster names itself the current cluster in Ray's temp directory: this test's, not the
    # machine's (where any other `ray.init()` here would join it).
    (root / "tmp" / "ray").mkdir(parents=True)
    os.environ["RAY_TMPDIR"] = str(root / "tmp")
    cluster = _FallbackCluster(root)
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    # Cluster also names itself the machine's current cluster: no later ray.init() may join it.
    from ray._common.utils import get_ray_address_file

    current = Path(get_ray_address_file(None))
    if current.exists() and current.read_text().strip() == cluster.address:
        current.unlink()
    return cluster


@pytest.fixture
def tag() -> str:
    """Put into every test job's env (`with_tag`): the test's replica processes carry it."""
    return uuid.uuid4().hex


@pytest.fixture
def client(ray_cluster: Any, tag: str) -> Iterator[TrainingClient]:
    """A client on the cluster whose replicas start in the job's directory (shared filesystem);
    after the test: every job deleted, and nothing of them left."""
    client = TrainingClient(RayBackend(files="shared"))
    yield client
    for job in client.list(None):
        client.delete(job.name, job.namespace)
    assert_nothing_left(tag)


@pytest.fixture
def upload_client(ray_cluster: Any, tag: str) -> Iterator[TrainingClient]:
    """A client that ships the job's directory to the nodes (runtime_env working_dir)."""
    client = TrainingClient(RayBackend())
    yield client
    for job in client.list(None):
        client.delete(job.name, job.namespace)
    assert_nothing_left(tag)
