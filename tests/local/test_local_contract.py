"""The planner's contract behaviours, end to end on the local backend, with tiny Python replicas."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from builders import make_job
from local_helpers import leftovers, py, supervisors, tagged_processes

from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.errors import AlreadyExistsError, NotFoundError

OK = py("print('done')")
SLEEP = py("import time; time.sleep(60)")


def fail_once(marker: Path, code: int) -> list[str]:
    """Exit `code` the first time (leaving `marker`), succeed afterwards."""
    return py(f"""
        import os, sys
        marker = {str(marker)!r}
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("failing once", flush=True)
            if {code} > 128:
                os.kill(os.getpid(), {code} - 128)
            sys.exit({code})
        print("succeeded after restart")
    """)


def run(client: TrainingClient, job: dict[str, object], timeout: float = 30) -> object:
    created = client.create(job)
    return client.wait(created.name, created.namespace, timeout=timeout, poll=0.05)


SUCCESS_JOBS = {
    "TFJob": lambda: (
        make_job("TFJob", "tf").chief(command=OK).ps(command=SLEEP).workers(2, command=OK)
    ),
    "PyTorchJob": lambda: make_job("PyTorchJob", "pt").master(command=OK).workers(2, command=OK),
    "MXJob": lambda: (
        make_job("MXJob", "mx").scheduler(command=OK).servers(command=OK).workers(1, command=OK)
    ),
    "XGBoostJob": lambda: make_job("XGBoostJob", "xgb").master(command=OK).workers(1, command=OK),
    "PaddleJob": lambda: make_job("PaddleJob", "pd").master(command=OK).workers(2, command=OK),
    # the workers only host ranks (sleep 365d); the launcher decides, cleanPodPolicy stops them
    "MPIJob": lambda: make_job("MPIJob", "mpi").replica("Launcher", command=OK).workers(2),
}


@pytest.mark.parametrize(
    "kind", list(SUCCESS_JOBS), ids=lambda k: f"a {k} whose replicas exit 0 succeeds"
)
def test_job_succeeds(client: TrainingClient, kind: str) -> None:
    builder = SUCCESS_JOBS[kind]().run_policy(cleanPodPolicy="All")
    job = run(client, builder.build())
    assert job_state(job) == "Succeeded", job.status
    assert job.status.completion_time is not None


FAIL = py("raise SystemExit(3)")
FAILING_JOBS = {
    "TFJob": lambda: make_job("TFJob", "tf").chief(command=SLEEP).workers(2, command=FAIL),
    "PyTorchJob": lambda: (
        make_job("PyTorchJob", "pt").master(command=FAIL).workers(2, command=SLEEP)
    ),
    "MXJob": lambda: (
        make_job("MXJob", "mx")
        .scheduler(command=SLEEP)
        .servers(command=SLEEP)
        .workers(1, command=FAIL)
    ),
    "XGBoostJob": lambda: (
        make_job("XGBoostJob", "xgb").master(command=FAIL).workers(1, command=SLEEP)
    ),
    "PaddleJob": lambda: make_job("PaddleJob", "pd").master(command=SLEEP).workers(1, command=FAIL),
    "MPIJob": lambda: make_job("MPIJob", "mpi").replica("Launcher", command=FAIL).workers(1),
}


@pytest.mark.parametrize(
    "kind", list(FAILING_JOBS), ids=lambda k: f"a {k} whose replica exits 3 under Never fails"
)
def test_failure_with_restart_policy_never_fails_the_job_and_cleans_up(
    client: TrainingClient, kind: str, tag: str, home: Path
) -> None:
    builder = FAILING_JOBS[kind]().run_policy(cleanPodPolicy="All")
    for rtype in list(builder.build()["spec"][builder.replica_field]):
        builder.set(f"spec.{builder.replica_field}.{rtype}.restartPolicy", "Never")
    finished = run(client, builder.build())
    assert job_state(finished) == "Failed"
    assert "failed" in (finished.status.conditions[-1].message or "")
    assert leftovers(tag, home) == []  # cleanPodPolicy All stopped the sleepers, supervisor done


def test_on_failure_restarts_the_replica_in_place(client: TrainingClient, tmp_path: Path) -> None:
    command = fail_once(tmp_path / "flag", 1)
    job = make_job("PyTorchJob", "onfail").master(restart_policy="OnFailure", command=command)
    finished = run(client, job.workers(1, command=OK).build())
    assert is_succeeded(finished)
    lines = [line.text for line in client.logs("onfail", replica="master-0")]
    assert lines[0] == "failing once" and lines[-1] == "succeeded after restart"
    assert any(text.startswith("--- trainop:") and "restart 1" in text for text in lines)


def test_exit_code_policy_retries_a_retryable_code(client: TrainingClient, tmp_path: Path) -> None:
    command = fail_once(tmp_path / "flag", 137)  # SIGKILL: 128+9, retryable
    job = (
        make_job("XGBoostJob", "retry")
        .master(command=OK)
        .workers(1, restart_policy="ExitCode", command=command)
    )
    finished = run(
        client,
        job.master(restart_policy="ExitCode", command=py("import time; time.sleep(1.5)")).build(),
    )
    assert is_succeeded(finished)
    text = "\n".join(line.text for line in client.logs("retry", replica="worker-0", follow=True))
    assert "failing once" in text and "succeeded after restart" in text and "re-created" in text


def test_exit_code_policy_fails_on_a_permanent_code(client: TrainingClient) -> None:
    job = make_job("PyTorchJob", "permanent").master(
        restart_policy="ExitCode", command=py("raise SystemExit(1)")
    )
    finished = run(client, job.workers(1, restart_policy="ExitCode", command=SLEEP).build())
    assert job_state(finished) == "Failed"


def test_backoff_limit_fails_the_job(client: TrainingClient) -> None:
    job = make_job("PyTorchJob", "backoff").master(
        restart_policy="OnFailure", command=py("raise SystemExit(2)")
    )
    finished = run(client, job.workers(1, command=SLEEP).run_policy(backoffLimit=1).build())
    assert job_state(finished) == "Failed"
    assert "backoff limit" in (finished.status.conditions[-1].message or "")


def test_active_deadline_stops_the_job_in_time(client: TrainingClient) -> None:
    job = (
        make_job("TFJob", "deadline").workers(2, command=SLEEP).run_policy(activeDeadlineSeconds=1)
    )
    started = time.monotonic()
    finished = run(client, job.build())
    assert job_state(finished) == "Failed"
    assert "deadline" in (finished.status.conditions[-1].message or "")
    assert time.monotonic() - started < 6


def test_clean_pod_policy_running_stops_the_parameter_server(
    client: TrainingClient, tag: str, home: Path
) -> None:
    job = (
        make_job("TFJob", "ps")
        .chief(command=OK)
        .ps(command=SLEEP)
        .run_policy(cleanPodPolicy="Running")
    )
    finished = run(client, job.build())
    assert is_succeeded(finished)
    assert leftovers(tag, home) == []  # the PS is gone and the supervisor has exited


def test_suspend_stops_every_replica_and_resume_restarts_them(
    client: TrainingClient, tag: str, tmp_path: Path, home: Path
) -> None:
    gate = tmp_path / "go"
    wait_for_gate = py(
        f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    )
    job = (
        make_job("PyTorchJob", "susp")
        .master(command=wait_for_gate)
        .workers(1, command=wait_for_gate)
    )
    client.create(job.build())
    _until(lambda: job_state(client.get("susp")) == "Running")
    client.suspend("susp")
    _until(lambda: job_state(client.get("susp")) == "Suspended")
    _until(lambda: tagged_processes(tag) == [])  # every replica stopped
    assert len(supervisors(home)) == 2  # the supervisor (and its watcher) wait for the resume
    client.resume("susp")
    _until(lambda: job_state(client.get("susp")) == "Running")
    gate.touch()
    assert is_succeeded(client.wait("susp", timeout=30, poll=0.05))


def test_delete_stops_everything(client: TrainingClient, tag: str, home: Path) -> None:
    client.create(make_job("TFJob", "del").workers(2, command=SLEEP).build())
    _until(lambda: len(tagged_processes(tag)) == 2 and len(supervisors(home)) == 2)  # + watcher
    client.delete("del")
    assert tagged_processes(tag) == [] and supervisors(home) == []
    assert not (home / "jobs" / "default" / "del").exists()
    with pytest.raises(NotFoundError):
        client.delete("del")


def test_same_name_is_rejected_while_the_job_exists(client: TrainingClient) -> None:
    job = make_job("TFJob", "twice").workers(1, command=OK).build()
    run(client, job)
    with pytest.raises(AlreadyExistsError, match="already exists"):
        client.create(job)  # finished jobs exist until deleted, like on Kubernetes
    client.delete("twice")
    assert is_succeeded(run(client, job))


def test_concurrent_jobs_get_distinct_ports(client: TrainingClient, home: Path) -> None:
    for name in ("one", "two"):
        client.create(
            make_job("PyTorchJob", name).master(command=SLEEP).workers(2, command=SLEEP).build()
        )
    ports = [
        json.loads((home / "jobs/default" / n / "local.json").read_text())["ports"]
        for n in ("one", "two")
    ]
    every = [p for table in ports for p in table.values()]
    assert len(every) == len(set(every)) == 6


def test_env_contract_is_visible_in_replicas(client: TrainingClient, home: Path) -> None:
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    show = py(f"import os; print(*(os.environ[n] for n in {names!r}))")
    job = (
        make_job("PyTorchJob", "env")
        .master(command=show)
        .workers(2, command=show)
        .run_policy(cleanPodPolicy="None")
    )
    run(client, job.build())
    lines = {line.replica: line.text.split() for line in client.logs("env", follow=True)}
    port = json.loads((home / "jobs/default/env/local.json").read_text())["ports"]["master-0"]
    assert lines == {
        "master-0": ["0", "3", "127.0.0.1", str(port)],
        "worker-0": ["1", "3", "127.0.0.1", str(port)],
        "worker-1": ["2", "3", "127.0.0.1", str(port)],
    }


def test_tf_config_points_at_local_ports(client: TrainingClient, home: Path) -> None:
    show = py("import os; print(os.environ['TF_CONFIG'])")
    run(
        client,
        make_job("TFJob", "tfc").workers(2, command=show).run_policy(cleanPodPolicy="None").build(),
    )
    ports = json.loads((home / "jobs/default/tfc/local.json").read_text())["ports"]
    config = json.loads(next(iter(client.logs("tfc", replica="worker-1", follow=True))).text)
    assert config["cluster"]["worker"] == [
        f"127.0.0.1:{ports['worker-0']}",
        f"127.0.0.1:{ports['worker-1']}",
    ]
    assert config["task"] == {"type": "worker", "index": 1}


def test_mxnet_dmlc_contract_points_at_the_local_scheduler(
    client: TrainingClient, home: Path
) -> None:
    names = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER")
    show = py(f"import os; print(*(os.environ[n] for n in {names!r}))")
    job = make_job("MXJob", "mxenv").scheduler(command=show).servers(command=show)
    run(client, job.workers(1, command=show).run_policy(cleanPodPolicy="None").build())
    lines = {line.replica: line.text.split() for line in client.logs("mxenv", follow=True)}
    port = json.loads((home / "jobs/default/mxenv/local.json").read_text())["ports"]["scheduler-0"]
    root = ["127.0.0.1", str(port), "1"]
    assert lines == {
        "scheduler-0": ["scheduler", *root],
        "server-0": ["server", *root],
        "worker-0": ["worker", *root],
    }


def _until(condition: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_init_containers_run_in_order_before_the_main_container(client: TrainingClient) -> None:
    builder = make_job("TFJob", "init").workers(1, command=py("print('main')"))
    builder.set(
        "spec.tfReplicaSpecs.Worker.template.spec.initContainers",
        [
            {"name": "first", "image": "busybox", "command": ["python", "-c", "print('first')"]},
            {"name": "second", "image": "busybox", "command": ["python", "-c", "print('second')"]},
        ],
    )
    assert is_succeeded(run(client, builder.build()))
    texts = [line.text for line in client.logs("init") if not line.text.startswith("---")]
    assert texts == ["first", "second", "main"]


def test_a_failing_init_container_fails_the_replica_with_its_code(
    client: TrainingClient, home: Path
) -> None:
    builder = make_job("TFJob", "badinit").workers(
        1, restart_policy="Never", command=py("print('never')")
    )
    builder.set(
        "spec.tfReplicaSpecs.Worker.template.spec.initContainers",
        [
            {
                "name": "first",
                "image": "busybox",
                "command": ["python", "-c", "raise SystemExit(7)"],
            },
        ],
    )
    assert job_state(run(client, builder.build())) == "Failed"
    pods = json.loads((home / "jobs/default/badinit/pods.json").read_text())
    assert [(p["phase"], p["exitCode"]) for p in pods] == [("Failed", 7)]
    assert "never" not in [line.text for line in client.logs("badinit")]


def test_ttl_after_finished_removes_the_job(client: TrainingClient, home: Path) -> None:
    job = make_job("TFJob", "ttl").workers(1, command=OK).run_policy(ttlSecondsAfterFinished=1)
    client.create(job.build())
    _until(lambda: not (home / "jobs/default/ttl").exists(), timeout=15)
    with pytest.raises(NotFoundError):
        client.get("ttl")


def test_a_command_that_does_not_exist_fails_the_replica_with_127(
    client: TrainingClient, home: Path
) -> None:
    job = make_job("TFJob", "nocmd").workers(1, restart_policy="Never", command=["no-such-binary"])
    assert job_state(run(client, job.build())) == "Failed"
    pods = json.loads((home / "jobs/default/nocmd/pods.json").read_text())
    assert [(p["exitCode"], p["reason"]) for p in pods] == [(127, "StartError")]
    assert "cannot start 'no-such-binary'" in next(iter(client.logs("nocmd"))).text
