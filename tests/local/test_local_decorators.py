"""The local backend decorates its replicas from one configuration (`decorators=`, else
`$TRAINOP_DECORATORS`): the replicas run with the env the decorators add, as on Kubernetes; a
failing decorator server fails the job before any replica starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from decorator_servers import POOL_ENV, config_of, policy_server, settings
from local_helpers import py

from trainop_core.backends.local import LocalBackend
from trainop_core.client import TrainingClient, job_state
from trainop_core.decorators.config import BuiltinDecorator

SHOW = py(f"import os; print(os.environ['SITE'], os.environ['{POOL_ENV}'], os.environ['RANK'])")


def decorated_client(home: Path, server: Any, **fields: Any) -> TrainingClient:
    config = config_of(settings(server, **fields))
    config.decorators = [BuiltinDecorator(env={"SITE": "lab"})]
    return TrainingClient(LocalBackend(home=home, decorators=config))


def test_replicas_run_with_what_the_decorators_add(
    home: Path, tag: str, client: TrainingClient
) -> None:
    job = make_job("PyTorchJob", "deco").master(command=SHOW).workers(2, command=SHOW)
    with policy_server() as server:
        local = decorated_client(home, server)
        created = local.create(job.build())
        done = local.wait(created.name, timeout=120)
        assert server.calls == 2  # one per replica type
    assert job_state(done) == "Succeeded"
    lines = {line.replica: line.text for line in local.logs("deco")}
    assert lines == {
        "master-0": "lab training 0",
        "worker-0": "lab training 1",
        "worker-1": "lab training 2",
    }


def test_a_failing_decorator_server_fails_the_job_before_any_replica_starts(
    home: Path, tag: str, client: TrainingClient
) -> None:
    marker = home.parent / "started"
    job = make_job("PyTorchJob", "no").master(command=py(f"open({str(marker)!r}, 'w')"))
    with policy_server() as server:
        server.stop()  # down
        local = decorated_client(home, server)
        created = local.create(job.workers(1, command=SHOW).build())
        done = local.wait(created.name, timeout=60)
    failed = done.status.conditions[-1]
    assert (failed.type, failed.reason) == ("Failed", "PyTorchJobFailedDecoration")
    assert 'decorator server "site-policy"' in (failed.message or "")
    assert not marker.exists()


def test_the_environment_names_the_configuration_by_default(
    home: Path, tag: str, client: TrainingClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "decorators.yaml"
    path.write_text(
        "apiVersion: trainop.kubeflow.org/v1alpha1\nkind: DecoratorConfiguration\n"
        f"entryPoints: false\ndecorators: [{{env: {{SITE: lab, {POOL_ENV}: env}}}}]\n"
    )
    monkeypatch.setenv("TRAINOP_DECORATORS", str(path))
    local = TrainingClient(LocalBackend(home=home))
    local.wait(local.create(make_job("PyTorchJob", "t").master(command=SHOW).build()).name)
    assert [line.text for line in local.logs("t")] == ["lab env 0"]
