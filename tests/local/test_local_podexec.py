"""`kubectl exec` for pods that are processes (backends/process/podexec.py): what an MPI launcher's
rsh agent runs on a process backend."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from trainop_core.backends.local.procs import JOB_MARKER, POD_MARKER
from trainop_core.backends.process.podexec import (
    remove_exec_spec,
    write_agent,
    write_configmaps,
    write_exec_spec,
)
from trainop_core.backends.process.podspec import Step

COMMAND = 'echo "$WHO in $(pwd) as $(hostname) marked $TRAINOP_POD_UID"'


def agent_for(tmp_path: Path) -> tuple[Path, Path]:
    specs = tmp_path / "exec"
    return write_agent(tmp_path / "agent", specs), specs


def test_the_agent_runs_a_command_as_if_inside_the_pod(tmp_path: Path) -> None:
    agent, specs = agent_for(tmp_path)
    workdir = tmp_path / "work"
    workdir.mkdir()
    step = Step("mpi", ("sleep", "365d"), {"PATH": os.environ["PATH"], "WHO": "worker-1"},
                str(workdir))  # fmt: skip
    write_exec_spec(specs, "pi-worker-1", step, {POD_MARKER: "uid-1", JOB_MARKER: "job"})
    # mpirun calls its agent with the host and the command as separate words.
    done = subprocess.run([str(agent), "pi-worker-1", *COMMAND.split(" ")], capture_output=True,
                          text=True, timeout=30, env={"PATH": os.environ["PATH"]})  # fmt: skip
    assert done.returncode == 0, done.stderr
    hostname = "pi-worker-1" if os.geteuid() == 0 else os.uname().nodename  # a UTS ns needs root
    assert done.stdout.strip() == f"worker-1 in {workdir} as {hostname} marked uid-1"


def test_a_pod_that_stopped_or_never_ran_cannot_be_exec_d_into(tmp_path: Path) -> None:
    agent, specs = agent_for(tmp_path)
    step = Step("mpi", ("sleep", "1"), {"PATH": os.environ["PATH"]}, str(tmp_path))
    write_exec_spec(specs, "pi-worker-0", step, {})
    remove_exec_spec(specs, "pi-worker-0")
    for pod in ("pi-worker-0", "../exec/pi-worker-0"):
        done = subprocess.run([str(agent), pod, "true"], capture_output=True, text=True,
                              timeout=30)  # fmt: skip
        assert done.returncode == 1
        assert "trainop exec:" in done.stderr


def test_a_spec_planted_as_a_link_or_a_fifo_is_refused_without_following_or_blocking(
    tmp_path: Path,
) -> None:
    agent, specs = agent_for(tmp_path)
    specs.mkdir(mode=0o700)
    secret = tmp_path / "elsewhere.json"
    secret.write_text('{"env": {}, "cwd": "/", "markers": {}}')
    (specs / "linked.json").symlink_to(secret)
    os.mkfifo(specs / "fifo.json")
    for pod in ("linked", "fifo"):
        done = subprocess.run([str(agent), pod, "echo", "ran"], capture_output=True, text=True,
                              timeout=30)  # fmt: skip
        assert done.returncode == 1, done.stdout
        assert f"exec spec of pod '{pod}' is damaged" in done.stderr
        assert "ran" not in done.stdout


def test_planned_configmaps_become_files_and_only_changes_count(tmp_path: Path) -> None:
    config = {"kind": "ConfigMap", "metadata": {"name": "pi-config"}, "data": {"hostfile": "a\n"}}
    role = {"kind": "Role", "metadata": {"name": "pi-launcher"}, "rules": []}
    assert write_configmaps(tmp_path, [config, role])
    assert (tmp_path / "pi-config" / "hostfile").read_text() == "a\n"
    assert not (tmp_path / "pi-launcher").exists()
    assert not write_configmaps(tmp_path, [config])
    config["data"] = {"hostfile": "a\nb\n"}
    assert write_configmaps(tmp_path, [config])
