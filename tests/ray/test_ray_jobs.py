"""The planner's behaviours end to end on a real multi-node Ray cluster, with tiny replicas:
success, failure, restart policies, limits, suspend, delete, gang placement, files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from builders import make_job
from ray_helpers import OK, SLEEP, addresses, assert_on_two_nodes, leftovers, py, tagged, until

from trainop_core.client import TrainingClient, is_succeeded, job_state
from trainop_core.errors import AlreadyExistsError, InvalidJobError, NotFoundError

SUCCESS_JOBS = {
    "TFJob": lambda: make_job("TFJob", "tf").chief(command=OK).workers(1, command=OK),
    "PyTorchJob": lambda: make_job("PyTorchJob", "pt").master(command=OK).workers(1, command=OK),
    "MXJob": lambda: (
        make_job("MXJob", "mx").scheduler(command=OK).servers(command=OK).workers(1, command=OK)
    ),
    "XGBoostJob": lambda: make_job("XGBoostJob", "xgb").master(command=OK).workers(1, command=OK),
}


def run(client: TrainingClient, job: dict[str, object], timeout: float = 120) -> object:
    created = client.create(job)
    return client.wait(created.name, created.namespace, timeout=timeout)


@pytest.mark.parametrize(
    "kind", list(SUCCESS_JOBS), ids=lambda k: f"a {k} whose replicas exit 0 succeeds on Ray"
)
def test_job_succeeds(client: TrainingClient, tag: str, kind: str) -> None:
    job = run(client, tagged(SUCCESS_JOBS[kind]().run_policy(cleanPodPolicy="All"), tag))
    assert job_state(job) == "Succeeded", job.status
    assert job.status.completion_time is not None


def test_env_contract_uses_node_ips_and_probed_ports(
    ray_cluster: Any, client: TrainingClient, tag: str
) -> None:
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    show = py(f"import os; print(*(os.environ[n] for n in {names!r}))")
    builder = make_job("PyTorchJob", "env").master(command=show).workers(3, command=show)
    builder.set("metadata.annotations", {"ray.trainop.dev/placement-strategy": "SPREAD"})
    job = run(client, tagged(builder, tag))
    where = addresses(job)
    lines = {line.replica: line.text.split() for line in client.logs("env", follow=True)}
    master_ip, master_port = where["master-0"]
    assert lines == {
        replica: [str(rank), "4", master_ip, str(master_port)]
        for rank, replica in enumerate(["master-0", "worker-0", "worker-1", "worker-2"])
    }
    per_node = [(ip, port) for ip, port in where.values()]
    assert len(per_node) == len(set(per_node))  # replicas sharing a node have distinct ports
    assert_on_two_nodes(ray_cluster, where)


def test_strict_spread_puts_one_replica_per_node(
    ray_cluster: Any, client: TrainingClient, tag: str
) -> None:
    builder = make_job("TFJob", "spread").workers(2, command=OK)
    builder.set("metadata.annotations", {"ray.trainop.dev/placement-strategy": "STRICT_SPREAD"})
    job = run(client, tagged(builder, tag))
    assert is_succeeded(job)
    assert_on_two_nodes(ray_cluster, addresses(job))


def test_failure_under_never_fails_the_job_and_stops_the_others(
    client: TrainingClient, tag: str
) -> None:
    builder = (
        make_job("PyTorchJob", "fails")
        .master(restart_policy="Never", command=py("raise SystemExit(3)"))
        .workers(1, restart_policy="Never", command=SLEEP)
        .run_policy(cleanPodPolicy="All")
    )
    job = run(client, tagged(builder, tag))
    assert job_state(job) == "Failed"
    until(lambda: not leftovers(tag).get("processes"), what="the sleeping worker stopped")


def test_on_failure_restarts_the_replica_in_place(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    flag = tmp_path / "flag"
    once = py(f"""
        import os, sys
        if not os.path.exists({str(flag)!r}):
            open({str(flag)!r}, "w").close(); print("failing once", flush=True); sys.exit(1)
        print("succeeded after restart")
    """)
    builder = make_job("PyTorchJob", "onfail").master(restart_policy="OnFailure", command=once)
    job = run(client, tagged(builder.workers(1, command=OK), tag))
    assert is_succeeded(job)
    lines = [line.text for line in client.logs("onfail", replica="master-0")]
    assert lines[0] == "failing once" and lines[-1] == "succeeded after restart"
    assert any("restart 1" in text for text in lines if text.startswith("--- trainop:"))
    # What a page about the job reads: the replica's restarts, the events, the log's last line.
    pods = {f"{p.replica_type.lower()}-{p.index}": p for p in client.replicas("onfail")}
    assert pods["master-0"].restart_count == 1 and pods["master-0"].phase == "Succeeded"
    assert all(e.type in ("Normal", "Warning") and e.reason for e in client.events("onfail"))
    assert "PyTorchJobSucceeded" in [e.reason for e in client.events("onfail")]
    tail = [line.text for line in client.logs("onfail", replica="master-0", tail=1)]
    assert tail == ["succeeded after restart"]


def test_exit_code_policy_recreates_the_replica_at_the_same_address(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    flag, second = tmp_path / "flag", tmp_path / "second-run"
    once = py(f"""
        import os, signal
        if not os.path.exists({str(flag)!r}):
            open({str(flag)!r}, "w").close(); print("killing myself", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        print("second run", os.environ["RANK"], flush=True)
        open({str(second)!r}, "w").close()
    """)
    # The master (whose exit ends the job) runs until the worker's second run has begun.
    until_second = py(f"""
        import os, time
        while not os.path.exists({str(second)!r}):
            time.sleep(0.1)
    """)
    builder = (
        make_job("XGBoostJob", "retry")
        .master(restart_policy="ExitCode", command=until_second)
        .workers(1, restart_policy="ExitCode", command=once)
    )
    client.create(tagged(builder, tag))
    before = until(lambda: addresses(client.get("retry")), what="placed")
    job = client.wait("retry", timeout=120)
    assert is_succeeded(job), job.status
    assert addresses(job) == before  # re-created in its own actor: same node, same port
    assert job.metadata.annotations["trainop.kubeflow.org/restarts"] == "1"
    text = [line.text for line in client.logs("retry", replica="worker-0")]
    assert "killing myself" in text and "second run 1" in text


def test_backoff_limit_fails_the_job(client: TrainingClient, tag: str) -> None:
    builder = (
        make_job("PyTorchJob", "backoff")
        .master(restart_policy="OnFailure", command=py("raise SystemExit(2)"))
        .workers(1, command=SLEEP)
        .run_policy(backoffLimit=1)
    )
    job = run(client, tagged(builder, tag))
    assert job_state(job) == "Failed"
    assert "backoff limit" in job.status.conditions[-1].message


def test_active_deadline_stops_the_job_in_time(client: TrainingClient, tag: str) -> None:
    builder = make_job("TFJob", "deadline").workers(2, command=SLEEP)
    client.create(tagged(builder.run_policy(activeDeadlineSeconds=4), tag))
    started = time.monotonic()
    job = client.wait("deadline", timeout=60)
    assert job_state(job) == "Failed" and "deadline" in job.status.conditions[-1].message
    assert time.monotonic() - started < 15
    until(lambda: set(leftovers(tag)) == {"actors"}, what="only the supervisor left")


def test_suspend_releases_the_gang_and_resume_places_it_again(
    client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    wait_for_gate = py(f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.1)")
    builder = make_job("PyTorchJob", "susp").master(command=wait_for_gate)
    client.create(tagged(builder.workers(1, command=wait_for_gate), tag))
    until(lambda: job_state(client.get("susp")) == "Running", what="running")
    client.suspend("susp")
    until(lambda: job_state(client.get("susp")) == "Suspended", what="suspended")
    until(lambda: set(leftovers(tag)) == {"actors"}, what="only the supervisor left")
    client.resume("susp")
    until(lambda: job_state(client.get("susp")) == "Running", what="running again")
    gate.touch()
    assert is_succeeded(client.wait("susp", timeout=60))


def test_stop_records_the_job_failed_and_stops_every_replica(
    client: TrainingClient, tag: str
) -> None:
    client.create(tagged(make_job("TFJob", "stopme").workers(2, command=SLEEP), tag))
    until(lambda: job_state(client.get("stopme")) == "Running", what="running")
    client.stop("stopme", reason="stopped by the test")
    job = client.get("stopme")
    assert job_state(job) == "Failed" and job.status.conditions[-1].message == "stopped by the test"
    until(lambda: set(leftovers(tag)) == {"actors"}, what="only the supervisor left")


def test_delete_leaves_nothing_behind(client: TrainingClient, tag: str) -> None:
    client.create(tagged(make_job("TFJob", "del").workers(2, command=SLEEP), tag))
    until(lambda: len(leftovers(tag).get("processes", [])) == 2, what="two replicas running")
    client.delete("del")
    assert set(leftovers(tag)) <= {"reserved"}  # actors, processes and group: gone at once
    until(lambda: not leftovers(tag), timeout=10, what="the group's resources given back")
    with pytest.raises(NotFoundError):
        client.delete("del")
    with pytest.raises(NotFoundError):
        client.get("del")


def test_same_name_is_rejected_while_the_job_exists(client: TrainingClient, tag: str) -> None:
    job = tagged(make_job("TFJob", "twice").workers(1, command=OK), tag)
    run(client, job)
    with pytest.raises(AlreadyExistsError, match="already exists"):
        client.create(job)
    client.delete("twice")
    assert is_succeeded(run(client, job))


def test_a_job_larger_than_the_cluster_waits_then_fails_on_time(
    client: TrainingClient, tag: str
) -> None:
    builder = make_job("PyTorchJob", "huge").master(command=OK).workers(4, command=OK)
    builder.run_policy(schedulingPolicy={"scheduleTimeoutSeconds": 4})  # 5 CPUs; the cluster: 4
    client.create(tagged(builder, tag))
    # Its placement group is asked for and waits: the supervisor tried, and holds nothing.
    until(lambda: _pending_groups("default/huge"), what="the job's placement group pending")
    assert job_state(client.get("huge")) == "Created"  # waiting, holding nothing (all or none)
    assert "reserved" not in leftovers(tag)
    started = time.monotonic()
    job = client.wait("huge", timeout=60)
    assert job_state(job) == "Failed"
    message = job.status.conditions[-1].message
    assert "could not be placed on the Ray cluster within 4 s" in message
    assert "5 bundle(s) {CPU: 1} x5, PACK" in message
    assert time.monotonic() - started < 10
    until(lambda: set(leftovers(tag)) <= {"actors"}, what="nothing reserved")


def _pending_groups(key: str) -> list[Any]:
    from ray.util.placement_group import placement_group_table

    groups = placement_group_table().values()
    return [g for g in groups if g["name"] == f"trainop:{key}" and g["state"] == "PENDING"]


def test_bundles_come_from_container_requests(client: TrainingClient, tag: str) -> None:
    builder = make_job("PyTorchJob", "big").master(command=OK).workers(1, command=OK)
    builder.container("Master", resources={"requests": {"cpu": "3"}})  # no node has 3 CPUs
    builder.run_policy(schedulingPolicy={"scheduleTimeoutSeconds": 2})
    job = run(client, tagged(builder, tag))
    assert "needs 2 bundle(s) {CPU: 3} + {CPU: 1}, PACK" in job.status.conditions[-1].message


def test_invalid_placement_annotation_is_rejected_with_its_field(client: TrainingClient) -> None:
    builder = make_job("TFJob", "badann").workers(1, command=OK)
    builder.set("metadata.annotations", {"ray.trainop.dev/placement-strategy": "EVERYWHERE"})
    with pytest.raises(InvalidJobError, match=r"placement-strategy\]: is 'EVERYWHERE'"):
        client.create(builder.build())
    assert client.list(None) == []


def test_init_containers_expansion_and_uploaded_working_dir(
    upload_client: TrainingClient, tag: str, tmp_path: Path
) -> None:
    (tmp_path / "data.txt").write_text("shipped with the job\n")
    builder = make_job("TFJob", "files").workers(
        1, command=["python", "-c", "print(open('data.txt').read().strip(), '$(GREETING)')"]
    )
    builder.env("Worker", GREETING="hello")
    builder.set(
        "spec.tfReplicaSpecs.Worker.template.spec.initContainers",
        [{"name": "first", "image": "busybox", "command": ["python", "-c", "print('init')"]}],
    )
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(tagged(builder, tag)))
    job = upload_client.create(job_file)
    assert is_succeeded(upload_client.wait(job.name, timeout=120))
    texts = [line.text for line in upload_client.logs("files") if not line.text.startswith("---")]
    assert texts == ["init", "shipped with the job hello"]


def test_ttl_after_finished_removes_the_job(client: TrainingClient, tag: str) -> None:
    builder = make_job("TFJob", "ttl").workers(1, command=OK).run_policy(ttlSecondsAfterFinished=1)
    client.create(tagged(builder, tag))
    until(lambda: [j for j in client.list(None) if j.name == "ttl"] == [], what="TTL deletion")
    with pytest.raises(NotFoundError):
        client.get("ttl")
