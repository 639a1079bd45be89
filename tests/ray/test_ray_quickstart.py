"""The README's Ray quick start, as written, on a fresh `ray start --head` with token
authentication on (Ray 2.59+ turns it on for a cluster started where a token exists under the
user's home): `trainop run` finds the cluster and the token by itself, and so do the commands
that name the cluster (`--ray-address`, `$RAY_ADDRESS`), as Ray's own tools do for a cluster they
find themselves. Everything is private: its own HOME (the token), Ray temp directory and port;
its processes, found by a tag in their environment, are killed at the end."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import processes
import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
TAG = "TRAINOP_QUICKSTART_TEST"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def head(tmp_path: Path) -> Iterator[tuple[dict[str, str], int]]:
    """A head node as a user starts it: a token made with Ray's own CLI, `ray start --head`."""
    tag = uuid.uuid4().hex
    short = Path(tempfile.mkdtemp(prefix="trq-", dir="/tmp"))  # Ray's socket paths are short
    env = {**os.environ, "HOME": str(tmp_path), "RAY_TMPDIR": str(short), TAG: tag}
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        env.pop(name, None)
    port = _free_port()
    try:
        made = subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True)
        assert made.returncode == 0 and (tmp_path / ".ray" / "auth_token").exists()
        command = [RAY, "start", "--head", "--port", str(port), "--num-cpus", "4"]
        command += ["--include-dashboard", "false", "--disable-usage-stats"]
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stderr
        assert "Token authentication is enabled" in started.stderr + started.stdout
        yield env, port
    finally:
        marker = f"{TAG}={tag}".encode()
        for pid in processes.live(lambda e: marker in (e / "environ").read_bytes().split(b"\0")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(short)], check=False)


def _trainop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trainop_core.cli.main", *args]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_readme_quick_start_works_as_written_with_token_authentication(
    head: tuple[dict[str, str], int],
) -> None:
    env, port = head
    ran = _trainop(env, "run", "examples/pytorch/ddp.yaml", "--backend", "ray")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "pytorchjob.kubeflow.org/pytorch-ddp-digits Succeeded" in ran.stderr
    named = {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    listed = _trainop(named, "get", "-A", "--backend", "ray")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "pytorch-ddp-digits" in listed.stdout and "Succeeded" in listed.stdout
    address = ["--ray-address", f"127.0.0.1:{port}"]
    deleted = _trainop(
        env, "delete", "pytorch-ddp-digits", "-n", "kubeflow", "--backend", "ray", *address
    )
    assert deleted.returncode == 0, deleted.stderr[-3000:]
    assert "InvalidAuthToken" not in listed.stderr + deleted.stderr


def test_a_connection_that_may_have_failed_on_the_token_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainop_core.backends.ray.auth import hint

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    refused = ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")
    assert hint(refused) == (
        "; if the cluster uses token authentication, set RAY_AUTH_MODE=token and give its token "
        "(RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, or the file ~/.ray/auth_token)"
    )
    assert hint(ValueError("unknown address scheme")) == ""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # set already: the token itself is wrong
    assert hint(refused) == ""
