"""`TrainingClient(backend="kubernetes")` end to end: the real operator runs in-process against the
real kube-apiserver, the kubelet stand-in runs the pods (and serves their logs), the client only
talks to the server, through the fault proxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from builders import make_job
from k8s import K8s

from trainop_core.client import TrainingClient, job_state
from trainop_core.errors import InvalidJobError, NotFoundError
from trainop_core.operator.manager import Manager
from trainop_core.testing.faultproxy import FaultProxy
from trainop_core.testing.kubelet import Rule


@pytest.fixture
def operator(k8s: K8s) -> Iterator[Manager]:
    with k8s.operator() as manager:
        yield manager


@pytest.fixture
def client(kubeconfig: Path) -> TrainingClient:
    return TrainingClient(backend="kubernetes", kubeconfig=str(kubeconfig))


def test_create_get_list_wait_logs_delete_through_the_operator(
    k8s: K8s, operator: Manager, client: TrainingClient
) -> None:
    k8s.kubelet.rules[:] = [Rule(run_seconds=0.3, log="step 1\nstep 2\n")]
    created = client.create(make_job("PyTorchJob", "mnist").master().workers(2).build())
    assert created.key == f"{k8s.namespace}/mnist"
    assert client.get("mnist").kind == "PyTorchJob"
    assert [j.name for j in client.list(k8s.namespace)] == ["mnist"]
    followed = list(client.logs("mnist", follow=True))  # returns once the job has finished
    assert sorted(x.replica for x in followed if x.text == "step 2") == [
        "master-0",
        "worker-0",
        "worker-1",
    ]
    finished = client.backend.wait("mnist", k8s.namespace, timeout=60)  # type: ignore[attr-defined]
    assert job_state(finished) == "Succeeded"
    lines = list(client.logs("mnist"))
    assert [(x.replica, x.text) for x in lines[:2]] == [("master-0", "step 1"),
                                                        ("master-0", "step 2")]  # fmt: skip
    assert {x.replica for x in lines} == {"master-0", "worker-0", "worker-1"}
    client.delete("mnist")
    with pytest.raises(NotFoundError):
        client.get("mnist")


def test_an_invalid_job_is_refused_before_any_request(
    k8s_proxy: FaultProxy, client: TrainingClient
) -> None:
    bad = make_job("TFJob", "bad").workers(-1).build()
    with pytest.raises(InvalidJobError, match="replicas"):
        client.create(bad)
    assert sum(k8s_proxy.stats.requests.values()) == 0, k8s_proxy.stats.requests


def test_importing_the_backend_package_does_not_import_kubernetes() -> None:
    import subprocess
    import sys

    code = (
        "import sys, trainop_core, trainop_core.client, trainop_core.backends.kubernetes; "
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported'"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=repo
    )
    assert done.returncode == 0, done.stderr
