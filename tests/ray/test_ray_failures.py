"""What a cluster does to a job: a node dies under it, the driver that created it exits, another
driver (the CLI) follows and deletes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import processes
import pytest
import raycluster
import yaml
from builders import make_job
from ray_helpers import addresses, leftovers, py, tagged, until

from trainop_core.backends.ray import record
from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.errors import NotFoundError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_node_killed_mid_job_restarts_the_gang_elsewhere(
    ray_cluster: Any, client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    if not hasattr(ray_cluster, "kill_node"):
        pytest.skip("needs the network-namespace cluster (nodes that can be killed)")
    mark = tmp_path / "node-killed"
    body = f"""
        import os, time
        print("started", os.environ["RANK"], "master at", os.environ["MASTER_ADDR"], flush=True)
        while not os.path.exists({str(mark)!r}):
            time.sleep(0.2)
        print("finished", os.environ["RANK"], "master at", os.environ["MASTER_ADDR"])
    """
    builder = (
        make_job("PyTorchJob", "survivor")
        .master(restart_policy="OnFailure", command=py(body))
        .workers(1, restart_policy="OnFailure", command=py(body))
        .run_policy(backoffLimit=3)
    )
    builder.set("metadata.annotations", {"ray.trainop.dev/placement-strategy": "SPREAD"})
    client.create(tagged(builder, tag))
    until(lambda: job_state(client.get("survivor")) == "Running", what="running")
    before = addresses(client.get("survivor"))
    victim = next(n for n in ray_cluster.nodes if n.ip == before["worker-0"][0])
    ray_cluster.kill_node(victim)  # for good: this test runs last (see conftest.py)
    moved = until(
        lambda: (a := addresses(client.get("survivor")))["worker-0"] != before["worker-0"] and a,
        timeout=120,
        what="worker-0 placed again",
    )
    mark.touch()
    job = client.wait("survivor", timeout=120)
    assert is_succeeded(job), job.status
    assert moved["worker-0"][0] != victim.ip
    assert job.metadata.annotations["trainop.kubeflow.org/restarts"] == "1"  # one, not two
    reasons = [e.reason for e in client.backend.events("survivor", "default")]
    assert "NodeLost" in reasons and "GangRestart" in reasons
    master = [line.text for line in client.logs("survivor", replica="master-0")]
    assert any("gang restart" in text for text in master)
    assert master[-1] == f"finished 0 master at {moved['master-0'][0]}"


def _supervisors(root: Path) -> list[int]:
    """Pids of the cluster's supervisor actors' processes (their logs are under its root)."""
    return processes.live(
        lambda entry: (
            (entry / "cmdline").read_bytes().startswith(b"ray::Supervisor")
            and raycluster._holds(entry, str(root))
        )
    )


def test_a_supervisor_that_dies_is_restarted_with_its_job_which_goes_on(
    ray_cluster: Any, client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    """Ray restarts a job's supervisor whose process died (the OOM killer, say): the new one
    takes the job as it was from its record, starts its replicas again (they died with the old
    one) and sees the job through."""
    # Supervisors of jobs that earlier tests deleted may still be on their way out.
    until(lambda: _supervisors(ray_cluster.root) == [], timeout=60, what="earlier supervisors gone")
    gate = tmp_path / "gate"
    body = py(f"""
        import os, time
        print("up", flush=True)
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.1)
    """)
    builder = make_job("PyTorchJob", "phoenix").master(command=body).workers(1, command=body)
    client.create(tagged(builder, tag))
    until(lambda: job_state(client.get("phoenix")) == "Running", what="running")
    before = client.get("phoenix")
    first = set(leftovers(tag).get("processes", []))
    [supervisor] = until(lambda: _supervisors(ray_cluster.root), what="its supervisor")
    os.kill(supervisor, signal.SIGKILL)
    again = until(
        lambda: (s := _supervisors(ray_cluster.root)) and s != [supervisor] and s,
        timeout=120,
        what="a new supervisor process",
    )
    assert supervisor not in again
    replicas = until(
        lambda: len(p := set(leftovers(tag).get("processes", []))) == 2 and not p & first and p,
        timeout=120,
        what="both replicas started again",
    )
    assert replicas
    reasons = [e.reason for e in client.backend.events("phoenix", "default")]
    assert "SupervisorRestarted" in reasons
    after = client.get("phoenix")
    assert after.metadata.uid == before.metadata.uid
    assert after.status.start_time == before.status.start_time  # the job's record, not a new job
    gate.touch()
    assert is_succeeded(client.wait("phoenix", timeout=120))
    client.delete("phoenix")
    assert record.load("default/phoenix", str(before.metadata.uid)) is None  # nothing kept


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trainop_core.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=os.environ)


@pytest.mark.slow
def test_a_job_outlives_the_driver_that_submitted_it(
    ray_cluster: Any, client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    ray_options = [
        "--backend",
        "ray",
        "--ray-address",
        ray_cluster.address,
        "--ray-files",
        "shared",
    ]
    gate = tmp_path / "gate"  # opened once the submitting driver has exited
    show = py(f"""
        import os, time
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.1)
        print('rank', os.environ['RANK'])
    """)
    job_file = tmp_path / "job.yaml"
    builder = make_job("PyTorchJob", "detached").master(command=show).workers(1, command=show)
    job_file.write_text(yaml.safe_dump(tagged(builder, tag)))
    submitted = _cli("submit", str(job_file), *ray_options)
    assert submitted.returncode == 0, submitted.stderr
    assert "pytorchjob.kubeflow.org/detached created" in submitted.stdout
    assert job_state(client.get("detached")) in ("Created", "Running")  # its driver is gone
    gate.touch()
    # The submitting driver has exited; this process (another driver) follows the job.
    lines = [f"{line.replica} | {line.text}" for line in client.logs("detached", follow=True)]
    assert sorted(lines) == ["master-0 | rank 0", "worker-0 | rank 1"]  # as they came
    assert is_succeeded(client.wait("detached", timeout=60))
    listed = _cli("get", "-A", *ray_options)  # a third driver lists it
    assert listed.returncode == 0 and "detached" in listed.stdout and "Succeeded" in listed.stdout
    deleted = _cli("delete", "detached", *ray_options)
    assert deleted.returncode == 0, deleted.stderr
    with pytest.raises(NotFoundError):
        client.get("detached")
    until(lambda: not leftovers(tag), what="nothing left")


@pytest.mark.slow
def test_trainop_run_reports_a_failed_job_with_exit_code_1(
    ray_cluster: Any, tmp_path: Path
) -> None:
    job_file = tmp_path / "job.yaml"
    builder = make_job("TFJob", "runfail").workers(
        1, restart_policy="Never", command=py("print('bye'); raise SystemExit(4)")
    )
    job_file.write_text(builder.yaml())
    ray_options = ["--backend", "ray", "--ray-address", ray_cluster.address]
    done = _cli("run", str(job_file), "--rm", *ray_options)
    assert done.returncode == 1, done.stderr
    assert "worker-0 | bye" in done.stdout
    assert "Failed" in done.stderr
