"""The Ray exec agent's replica side (`trainop_core.backends.ray.rsh.Execs`), without a cluster:
a command run in a pod's environment is followed to its end and can be stopped."""

from __future__ import annotations

import os
from pathlib import Path

from trainop_core.backends.process.podexec import write_exec_spec
from trainop_core.backends.process.podspec import Step
from trainop_core.backends.ray.rsh import Execs


def execs_for(tmp_path: Path) -> tuple[Execs, Path]:
    specs = tmp_path / "exec"
    step = Step("mpi", ("sleep", "365d"), {"PATH": os.environ["PATH"], "WHO": "worker-0"},
                str(tmp_path))  # fmt: skip
    write_exec_spec(specs, "pi-worker-0", step, {"TRAINOP_POD_UID": "u0"})
    return Execs(tmp_path), specs


def test_a_command_runs_in_the_pod_s_env_and_its_output_and_exit_code_come_back(
    tmp_path: Path,
) -> None:
    execs, specs = execs_for(tmp_path)
    number = execs.start(specs, "pi-worker-0", ["echo", "$WHO", "$TRAINOP_POD_UID;", "exit", "3"])
    out, offset, code = b"", 0, None
    while code is None:
        answer = execs.read(number, offset, timeout=5.0)
        out, offset, code = out + answer["data"], answer["offset"], answer["code"]
    assert (out.decode().strip(), code) == ("worker-0 u0", 3)


def test_stopping_kills_the_command(tmp_path: Path) -> None:
    execs, specs = execs_for(tmp_path)
    number = execs.start(specs, "pi-worker-0", ["sleep", "600"])
    execs.stop(number)
    assert execs.read(number, 0, timeout=5.0)["code"] not in (None, 0)


def read_to_end(execs: Execs, number: int, offset: int = 0) -> tuple[bytes, int]:
    out, code = b"", None
    while code is None:
        answer = execs.read(number, offset, timeout=5.0)
        out, offset, code = out + answer["data"], answer["offset"], answer["code"]
    return out, code


def test_a_talkative_command_keeps_a_bounded_tail_in_memory_and_nothing_on_disk(
    tmp_path: Path,
) -> None:
    """20 MiB of output not read while it is written: the oldest is dropped with a marker that
    says how much, the newest is kept, and no file on the node grows with it."""
    execs, specs = execs_for(tmp_path)
    limit = 1024 * 1024
    execs.limit = limit
    before = sorted(p.name for p in tmp_path.iterdir())
    number = execs.start(
        specs,
        "pi-worker-0",
        ["yes", "0123456789abcdef", "|", "head", "-c", "20971520;", "echo", "END"],
    )
    proc = execs._procs[number].proc
    proc.wait(timeout=60)
    out, code = read_to_end(execs, number)
    assert code == 0
    assert out.startswith(b"\n--- trainop: ") and b"bytes of older output dropped ---" in out
    assert out.endswith(b"END\n") and len(out) <= limit + 100
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_command_that_leaves_a_process_holding_its_output_still_ends(tmp_path: Path) -> None:
    execs, specs = execs_for(tmp_path)
    number = execs.start(specs, "pi-worker-0", ["sleep", "600", "&", "echo", "started"])
    try:
        out, code = read_to_end(execs, number)
        assert (out.strip(), code) == (b"started", 0)
    finally:
        execs.stop(number)  # the whole group: the sleep too
