"""The Ray backend decorates its replicas from the same configuration as every other backend
(`decorators=`): its supervisor runs the in-process decorators and calls the decorator servers,
and the replicas run with the env they add; a failing server fails the job before anything is
placed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from builders import make_job
from decorator_servers import POOL_ENV, config_of, policy_server, settings
from ray_helpers import assert_nothing_left, py, tagged

from trainop_core.backends.ray import RayBackend
from trainop_core.client import TrainingClient, job_state
from trainop_core.decorators.config import BuiltinDecorator

SHOW = py(f"import os; print(os.environ['SITE'], os.environ['{POOL_ENV}'], os.environ['RANK'])")


@pytest.fixture
def decorated(ray_cluster: Any, tag: str) -> Iterator[Any]:
    """(a client whose backend uses the site policy and an in-process env, the server)."""
    with policy_server() as server:
        config = config_of(settings(server, timeoutSeconds=5))
        config.decorators = [BuiltinDecorator(env={"SITE": "lab"})]
        client = TrainingClient(RayBackend(files="shared", decorators=config))
        yield client, server
        for job in client.list(None):
            client.delete(job.name, job.namespace)
    assert_nothing_left(tag)


def test_replicas_run_with_what_the_decorators_add(decorated: Any, tag: str) -> None:
    client, server = decorated
    job = make_job("PyTorchJob", "deco").master(command=SHOW).workers(2, command=SHOW)
    created = client.create(tagged(job, tag))
    done = client.wait(created.name, timeout=180)
    assert job_state(done) == "Succeeded", done.status
    assert server.calls == 2  # one per replica type, although placing plans twice
    lines = {line.replica: line.text for line in client.logs("deco", follow=True)}
    assert lines == {
        "master-0": "lab training 0",
        "worker-0": "lab training 1",
        "worker-1": "lab training 2",
    }


def test_a_refusing_decorator_server_fails_the_job_unplaced(decorated: Any, tag: str) -> None:
    client, _ = decorated
    hog = make_job("PyTorchJob", "hog").master(command=SHOW)
    hog.container("Master", resources={"limits": {"nvidia.com/gpu": 16}})
    done = client.wait(client.create(tagged(hog, tag)).name, timeout=120)
    failed = done.status.conditions[-1]
    assert (failed.type, failed.reason) == ("Failed", "PyTorchJobFailedDecoration")
    assert "asks 16 GPUs" in (failed.message or "")
    assert "ray.trainop.dev/addresses" not in (done.metadata.annotations or {})
