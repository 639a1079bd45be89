"""`trainop` as a hostile or unlucky user meets it: every bad input or broken environment ends
with a message and an exit code, never a traceback, a hang or a half-made job."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from builders import make_job

from trainop_core.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "local"))  # the process scans of the local tests
from local_helpers import leftovers  # noqa: E402 - needs the path above

pytestmark = pytest.mark.timeout(300)
OK = ["python", "-c", "print('done')"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("TRAINOP_HOME", str(path))
    monkeypatch.setenv("TRAINOP_TEST_TAG", uuid.uuid4().hex)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    yield path
    names = sorted(p.name for p in (path / "jobs" / "default").glob("[a-z]*"))
    if names:
        main(["delete", *names])
    assert leftovers(os.environ["TRAINOP_TEST_TAG"], path) == []


def trainop(
    *args: str, stdin: str = "", memory_mb: int = 0, file_kb: int = -1, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`trainop ARGS` in a fresh process, optionally with an address-space or file-size limit."""

    def limits() -> None:
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
        if file_kb >= 0:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_kb * 1024, file_kb * 1024))

    return subprocess.run(
        [sys.executable, "-m", "trainop_core.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limits,
        check=False,
    )


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def created(home: Path) -> list[str]:
    """Everything under TRAINOP_HOME (nothing, when a command refused its input)."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


def billion_laughs() -> str:
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, 10):
        text += f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize(
    ("command", "content", "expected"),
    [
        ("validate", billion_laughs(), "more than 250000 values once aliases are expanded"),
        ("submit", billion_laughs(), "more than 250000 values once aliases are expanded"),
        ("validate", "[" * 200_000, "nested more than 64 levels deep (line 1, column 65)"),
        ("validate", "".join(" " * i + "a:\n" for i in range(2_000)), "64 levels deep (line 65, "),
        ("validate", "\x00\x01\x02binary", "not valid YAML or JSON: "),
        ("render", billion_laughs(), "more than 250000 values once aliases are expanded"),
    ],
    ids=[
        "validate refuses a billion laughs in bounded memory",
        "submit refuses a billion laughs and creates nothing",
        "validate refuses deep flow nesting at trainop's limit",
        "validate refuses deep block nesting at trainop's limit",
        "validate refuses binary garbage",
        "render refuses a billion laughs",
    ],
)
def test_hostile_files_end_with_exit_2_and_a_message(
    home: Path, tmp_path: Path, command: str, content: str, expected: str
) -> None:
    done = trainop(command, str(write(tmp_path, content)), memory_mb=1024)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert created(home) == []


def test_validate_of_an_endless_file_stops_at_the_size_limit(home: Path) -> None:
    done = trainop("validate", "/dev/zero", memory_mb=1024, timeout=60)
    assert done.returncode == 2
    assert "/dev/zero: is larger than 3 MiB" in done.stderr


def test_non_utf8_is_refused_with_the_offset_of_the_bad_byte(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(make_job("TFJob", "x").workers(1, command=OK).yaml().encode() + b"# caf\xe9\n")
    done = trainop("validate", str(path))
    assert done.returncode == 2
    assert "is not UTF-8 text: byte 0xe9 at offset" in done.stderr


def test_a_job_larger_than_this_machine_is_refused_before_anything_exists(
    home: Path, tmp_path: Path
) -> None:
    job = make_job("TFJob", "huge").workers(1_000_000_000, command=OK)
    assert trainop("validate", str(write(tmp_path, job.yaml()))).returncode == 0  # valid upstream

    done = trainop("submit", str(write(tmp_path, job.yaml())), memory_mb=1024, timeout=60)

    assert done.returncode == 2, done.stderr
    assert "the job has 1000000000 replicas; the local backend starts at most" in done.stderr
    assert "TRAINOP_LOCAL_MAX_REPLICAS" in done.stderr
    assert created(home) == []  # no directory, not even the ports lock


def test_the_replica_limit_can_be_set(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, make_job("TFJob", "three").workers(3, command=OK).yaml())
    monkeypatch.setenv("TRAINOP_LOCAL_MAX_REPLICAS", "2")
    refused = trainop("submit", str(path))
    assert refused.returncode == 2 and "starts at most 2" in refused.stderr
    monkeypatch.setenv("TRAINOP_LOCAL_MAX_REPLICAS", "3")
    assert trainop("run", str(path)).returncode == 0


def test_an_overflowing_ttl_is_refused_with_its_path(home: Path, tmp_path: Path) -> None:
    job = make_job("TFJob", "ttl").workers(1, command=OK).run_policy(ttlSecondsAfterFinished=10**23)
    done = trainop("submit", str(write(tmp_path, job.yaml())))
    assert done.returncode == 2
    assert "spec.runPolicy.ttlSecondsAfterFinished: must be at most 2147483647" in done.stderr
    assert created(home) == []


@pytest.mark.parametrize(
    ("stdin", "expected"),
    [
        ("", "standard input: expected exactly one job; it is empty"),
        ("\n\n# only a comment\n", "standard input: expected exactly one job; it is empty"),
        ("job.yaml\n", "expected exactly one job; found no mapping"),
        ("---\na: 1\n---\nb: 2\n", "expected exactly one job; found 2 documents"),
    ],
    ids=[
        "empty stdin",
        "stdin with only a comment",
        "a file name on stdin is not opened",
        "two documents on stdin",
    ],
)
def test_run_from_stdin_explains_what_is_wrong(
    home: Path, tmp_path: Path, stdin: str, expected: str
) -> None:
    write(tmp_path, make_job("TFJob", "x").workers(1, command=OK).yaml())
    done = subprocess.run(
        [sys.executable, "-m", "trainop_core.cli.main", "run", "-"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert expected in done.stderr
    assert created(home) == []


def test_run_from_stdin_refuses_an_endless_stream(home: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [sys.executable, "-m", "trainop_core.cli.main", "run", "-"],
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert "standard input: is larger than 3 MiB" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["get", "-n", "../../outside", "-o", "json"],
        ["get", "-A", "-n", "../../outside"],
        ["get", "decoy", "-n", "../../outside"],
        ["logs", "decoy", "-n", "../../outside"],
        ["logs", "../../outside/decoy"],
        ["logs", "x", "--replica", "../../../../outside/decoy/logs/worker-0"],
        ["delete", "../../outside/decoy"],
    ],
    ids=lambda a: " ".join(a),
)
def test_no_command_reads_outside_trainop_home(
    home: Path, tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    decoy = tmp_path / "outside" / "decoy"
    (decoy / "logs").mkdir(parents=True)
    secret = make_job("TFJob", "decoy").workers(1, command=OK).build()
    secret["metadata"]["annotations"] = {"secret": "outside-home"}
    (decoy / "job.json").write_text(json.dumps(secret))
    (decoy / "local.json").write_text(json.dumps({"workdir": "/", "ports": {"worker-0": 1}}))
    (decoy / "logs" / "worker-0.log").write_text("outside-home\n")
    home.mkdir()

    code = main(args)

    out, err = capsys.readouterr()
    assert "outside-home" not in out + err
    assert code in ((0,) if "-A" in args else (1, 2))  # -A lists every namespace, as kubectl
    assert decoy.exists()


def test_an_invalid_namespace_says_why(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", "-n", "../../somewhere", "-o", "json"]) == 2
    assert 'namespace "../../somewhere" is not valid' in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "soon"])
def test_a_timeout_must_be_a_positive_number(home: Path, tmp_path: Path, value: str) -> None:
    path = write(tmp_path, make_job("TFJob", "t").workers(1, command=OK).yaml())
    done = trainop("run", str(path), "--timeout", value)
    assert done.returncode == 2
    assert "expected a positive number of seconds" in done.stderr
    assert created(home) == []


def test_a_full_disk_is_reported_and_leaves_no_half_made_job(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path, make_job("TFJob", "full").workers(1, command=OK).yaml())
    done = trainop("submit", str(path), file_kb=0)  # every write beyond 0 bytes fails: EFBIG
    assert done.returncode == 1, done.stderr
    assert "cannot create job default/full: File too large" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / "jobs" / "default" / "full").exists()


def read_only(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`trainop ARGS` with TRAINOP_HOME mounted read-only (a private mount namespace)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) for a read-only mount")
    script = textwrap.dedent(f"""
        mount --bind "{home}" "{home}" && mount -o remount,bind,ro "{home}" || exit 77
        exec "{sys.executable}" -m trainop_core.cli.main "$@"
    """)
    done = subprocess.run(
        [unshare, "-Urm", "sh", "-c", script, "sh", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 77 or "unshare:" in done.stderr:
        pytest.skip(f"no private read-only mount here: {done.stderr.strip()[:100]}")
    return done


def test_a_read_only_home_can_be_read_and_refuses_new_jobs_clearly(
    home: Path, tmp_path: Path
) -> None:
    assert (
        main(["run", str(write(tmp_path, make_job("TFJob", "old").workers(1, command=OK).yaml()))])
        == 0
    )
    path = write(tmp_path, make_job("TFJob", "new").workers(1, command=OK).yaml(), "new.yaml")

    listed = read_only(home, "get", "-A")
    refused = read_only(home, "submit", str(path))

    assert listed.returncode == 0 and "old" in listed.stdout, listed.stderr
    assert refused.returncode == 1
    assert "cannot create job default/new: Read-only file system" in refused.stderr
    assert "Traceback" not in listed.stderr + refused.stderr


def test_delete_in_a_read_only_home_fails_with_the_reason_and_removes_nothing(
    home: Path, tmp_path: Path
) -> None:
    job = write(tmp_path, make_job("TFJob", "kept").workers(1, command=OK).yaml())
    assert main(["run", str(job)]) == 0
    before = created(home)

    refused = read_only(home, "delete", "kept")

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "cannot delete job default/kept: Read-only file system" in refused.stderr
    assert "deleted" not in refused.stdout and "Traceback" not in refused.stderr
    assert created(home) == before


NOBODY = 65534


def as_another_user(*args: str) -> subprocess.CompletedProcess[str]:
    """`trainop ARGS` in a user namespace without root: files owned by another user (`NOBODY`)
    are another user's to it, as to any unprivileged process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) for a user namespace")
    done = subprocess.run(
        [unshare, "-U", sys.executable, "-m", "trainop_core.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "unshare:" in done.stderr:
        pytest.skip(f"no user namespace here: {done.stderr.strip()[:100]}")
    return done


def test_delete_of_a_job_in_another_users_directory_fails_and_leaves_it_running(
    home: Path, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    sleep = ["python", "-c", "import time; print('up', flush=True); time.sleep(120)"]
    job = write(tmp_path, make_job("TFJob", "theirs").workers(1, command=sleep).yaml())
    assert main(["submit", str(job)]) == 0
    space = home / "jobs" / "default"
    log = space / "theirs" / "logs" / "worker-0.log"
    _until(lambda: log.exists() and "up" in log.read_text())
    os.chown(space, NOBODY, NOBODY)  # the namespace directory is someone else's
    space.chmod(0o755)
    try:
        refused = as_another_user("delete", "theirs")
        state = as_another_user("get", "theirs")
    finally:
        os.chown(space, os.getuid(), os.getgid())
        space.chmod(0o700)

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "cannot delete job default/theirs: Permission denied" in refused.stderr
    assert "deleted" not in refused.stdout
    assert state.returncode == 0 and "Running" in state.stdout, state.stdout + state.stderr


def _until(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def immutable_files_here(tmp_path: Path) -> None:
    """Skip unless this process can make a file immutable here (root, a file system that can)."""
    probe = tmp_path / "probe"
    probe.touch()
    chattr = shutil.which("chattr")
    done = subprocess.run([chattr or "chattr", "+i", str(probe)], capture_output=True, check=False)
    if chattr is None or done.returncode != 0:
        pytest.skip("needs chattr +i (root, and a file system with immutable files)")
    subprocess.run([chattr, "-i", str(probe)], check=True)


def test_run_rm_that_cannot_remove_its_job_says_so_and_exits_1(home: Path, tmp_path: Path) -> None:
    immutable_files_here(tmp_path)
    pin = ["sh", "-c", 'touch "$TRAINOP_JOB_DIR/pinned" && chattr +i "$TRAINOP_JOB_DIR/pinned"']
    job = write(tmp_path, make_job("TFJob", "pinned").workers(1, command=pin).yaml())
    try:
        done = trainop("run", "--rm", str(job))
    finally:  # the job's directory, or what the removal left of it (renamed aside)
        for pinned in home.glob("jobs/default/*pinned*/pinned"):
            subprocess.run(["chattr", "-i", str(pinned)], check=True)
            shutil.rmtree(pinned.parent)

    assert done.returncode == 1, done.stderr
    assert "Succeeded" in done.stderr  # the job itself succeeded ...
    assert "the job was not removed: cannot delete job default/pinned" in done.stderr
    assert "Operation not permitted" in done.stderr  # ... but --rm could not do its part
    assert "Traceback" not in done.stderr


def test_the_state_directories_are_created_private(home: Path, tmp_path: Path) -> None:
    assert (
        main(["run", str(write(tmp_path, make_job("TFJob", "mine").workers(1, command=OK).yaml()))])
        == 0
    )
    job = home / "jobs" / "default" / "mine"
    for directory in (home, home / "jobs", home / "jobs" / "default", job, job / "logs"):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    files = [p for p in home.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"job.json", "local.json", "events.jsonl", "worker-0.log"}
    # Owner only; the job's exec agent (what an MPI launcher runs to reach a worker) must run.
    executable = {job / "exec-agent"}
    assert {str(p.relative_to(home)): oct(p.stat().st_mode & 0o777) for p in files} == {
        str(p.relative_to(home)): "0o700" if p in executable else "0o600" for p in files
    }


def test_listing_directories_left_world_readable_by_an_older_trainop_are_tightened(
    home: Path, tmp_path: Path
) -> None:
    (home / "jobs" / "default").mkdir(parents=True)
    (home / "jobs").chmod(0o755)
    (home / "jobs" / "default").chmod(0o755)
    assert (
        main(
            ["run", str(write(tmp_path, make_job("TFJob", "tight").workers(1, command=OK).yaml()))]
        )
        == 0
    )
    assert (home / "jobs").stat().st_mode & 0o777 == 0o700
    assert (home / "jobs" / "default").stat().st_mode & 0o777 == 0o700


def test_python_api_sources_get_the_same_limits(home: Path) -> None:
    from trainop_core.client import TrainingClient
    from trainop_core.errors import InvalidJobError

    job = make_job("TFJob", "loop").workers(1, command=OK).build()
    job["spec"]["self"] = job
    with pytest.raises(InvalidJobError, match="contains itself"):
        TrainingClient().create(job)
    with pytest.raises(InvalidJobError, match="more than 250000 values"):
        TrainingClient().create(billion_laughs())
    with pytest.raises(InvalidJobError, match="is larger than 3 MiB"):
        TrainingClient().create(io.StringIO("x" * 4_000_000).read() + "\nkind: TFJob")
    assert created(home) == []


def test_a_nul_byte_in_a_command_fails_the_replica_not_the_supervisor(
    home: Path, tmp_path: Path
) -> None:
    job = make_job("TFJob", "nul").workers(1, command=["python", "-c", "print(1)\x00"])
    job.run_policy(backoffLimit=0)
    done = trainop("run", str(write(tmp_path, job.yaml().replace("\\0", "\\x00"))), timeout=120)
    assert done.returncode == 1, done.stderr
    assert "worker-0 | trainop: cannot start" in done.stdout
    assert "the local supervisor failed" not in done.stderr
