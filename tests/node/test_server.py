"""The process node's kubelet endpoint (trainop_core.node.server) behind the REAL kube-apiserver:
``kubectl logs`` and ``kubectl exec`` reach it over TLS as the API server's kubelet client, and
nobody else gets in. The node's kubelet is played by a small ContainerRuntime over files."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from trainop_core.node.crilog import CriLogWriter
from trainop_core.node.pki import KubeletPki
from trainop_core.node.remotecommand import ExecCommand
from trainop_core.node.server import RunningServer, serve_in_thread
from trainop_core.testing.controlplane import ControlPlane

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "kubectl"], capture_output=True).returncode != 0,
    reason="kubectl is not on PATH",
)

NODE, NS, POD = "node-server-test", "default", "pod-a"
Key = tuple[str, str, str]


class FileRuntime:
    """A ContainerRuntime: container (ns, pod, name) has attempts, each a CRI log file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.attempts: dict[Key, list[Path]] = {}
        self.alive: set[Key] = set()

    def start(self, container: str, clock: Callable[[], int] = time.time_ns) -> CriLogWriter:
        """A new attempt of `container`: its log writer (the attempt before is "previous")."""
        key = (NS, POD, container)
        files = self.attempts.setdefault(key, [])
        files.append(self.root / f"{container}-{len(files)}.log")
        self.alive.add(key)
        return CriLogWriter(files[-1], clock=clock)

    def log_files(
        self, namespace: str, pod: str, container: str, previous: bool
    ) -> list[Path] | None:
        files = self.attempts.get((namespace, pod, container), [])
        if previous:
            return [files[-2]] if len(files) > 1 else None
        return [files[-1]] if files else None

    def running(self, namespace: str, pod: str, container: str) -> bool:
        return (namespace, pod, container) in self.alive

    def exec_command(
        self, namespace: str, pod: str, container: str, command: Sequence[str], tty: bool
    ) -> ExecCommand | None:
        if (namespace, pod, container) not in self.alive:
            return None
        return ExecCommand(command, env={**os.environ, "IN_POD": pod}, cwd=str(self.root))


def wait_for(check: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class Node:
    def __init__(
        self, cp: ControlPlane, pki: KubeletPki, server: RunningServer, runtime: FileRuntime
    ) -> None:
        self.cp, self.pki, self.server, self.runtime = cp, pki, server, runtime

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.cp.kubeconfig))
        return subprocess.run(
            ["kubectl", "-n", NS, *args], env=env, input=stdin, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    pki = KubeletPki.create(tmp_path_factory.mktemp("pki"))
    runtime = FileRuntime(tmp_path_factory.mktemp("logs"))
    context = pki.server_context(*pki.node_serving(NODE, ["127.0.0.1", "localhost"]))
    server = serve_in_thread(runtime, context)
    with ControlPlane(controller_manager=False, kubelet_pki=pki) as cp:
        register(cp, server.port)
        try:
            yield Node(cp, pki, server, runtime)
        finally:
            server.stop()


def register(cp: ControlPlane, port: int) -> None:
    """A Node at 127.0.0.1 whose kubelet endpoint is `port`, and a pod bound to it."""
    cp.rest.create("/api/v1/nodes", {"metadata": {"name": NODE}})
    cp.rest.patch(f"/api/v1/nodes/{NODE}/status", {"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
    }})  # fmt: skip
    containers = [{"name": name, "image": "busybox"} for name in ("main", "side")]
    pod = {"metadata": {"name": POD}, "spec": {"nodeName": NODE, "containers": containers}}
    cp.rest.create(f"/api/v1/namespaces/{NS}/pods", pod)
    cp.rest.patch(f"/api/v1/namespaces/{NS}/pods/{POD}/status", {"status": {"phase": "Running"}})


def test_logs_current_previous_tail_since_timestamps(node: Node) -> None:
    old = time.time_ns() - 3600 * 10**9
    with node.runtime.start("main", clock=lambda: old) as first:
        first.write("stdout", b"first attempt\n")
    clocks = iter([old, old, time.time_ns(), time.time_ns()])
    with node.runtime.start("main", clock=lambda: next(clocks)) as second:  # a restart
        second.write("stdout", b"one\ntwo\n")
        second.write("stderr", b"three\nfour")  # no newline: ended by close()
    got = node.kubectl("logs", POD, "-c", "main")
    assert got.returncode == 0, got.stderr
    assert got.stdout == "one\ntwo\nthree\nfour\n"
    assert node.kubectl("logs", POD, "-c", "main", "--previous").stdout == "first attempt\n"
    assert node.kubectl("logs", POD, "-c", "main", "-p", "-f").stdout == "first attempt\n"
    assert node.kubectl("logs", POD, "-c", "main", "--tail=1").stdout == "four\n"
    assert node.kubectl("logs", POD, "-c", "main", "--since=10m").stdout == "three\nfour\n"
    assert node.kubectl("logs", POD, "-c", "main", "--limit-bytes=6").stdout == "one\ntw"
    stamped = node.kubectl("logs", POD, "-c", "main", "--tail=1", "--timestamps").stdout
    assert stamped.endswith("Z four\n") and stamped[:4].isdigit()


def test_logs_of_unknown_container_attempt_is_a_clear_error(node: Node) -> None:
    got = node.kubectl("logs", POD, "-c", "side", "--previous")
    assert got.returncode != 0 and "previous terminated container" in got.stderr


def test_logs_follow_ends_with_the_container(node: Node) -> None:
    writer = node.runtime.start("side")
    env = dict(os.environ, KUBECONFIG=str(node.cp.kubeconfig))
    follow = subprocess.Popen(
        ["kubectl", "-n", NS, "logs", "-f", POD, "-c", "side"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        writer.write("stdout", b"hello\n")
        assert follow.stdout is not None
        assert follow.stdout.readline() == "hello\n"  # streamed while the container runs
        writer.write("stdout", b"bye\n")
        writer.close()
        node.runtime.alive.discard((NS, POD, "side"))
        out, err = follow.communicate(timeout=30)
    finally:
        follow.kill()
    assert (follow.returncode, out) == (0, "bye\n"), err


def test_exec_exit_code_stdin_and_env(node: Node) -> None:
    node.runtime.start("main").close()
    assert node.kubectl("exec", POD, "-c", "main", "--", "true").returncode == 0
    failed = node.kubectl("exec", POD, "-c", "main", "--", "sh", "-c", "echo oops >&2; exit 7")
    assert failed.returncode == 7 and "oops" in failed.stderr
    data = "".join(f"line {i}\n" for i in range(20000))  # ~200 kB through stdin and back
    cat = node.kubectl("exec", "-i", POD, "-c", "main", "--", "cat", stdin=data)
    assert (cat.returncode, cat.stdout) == (0, data), cat.stderr
    env = node.kubectl("exec", POD, "-c", "main", "--", sys.executable, "-c",
                       "import os; print(os.environ['IN_POD'], os.getcwd())")  # fmt: skip
    assert env.stdout.split() == [POD, str(node.runtime.root)]
    missing = node.kubectl("exec", POD, "-c", "main", "--", "no-such-command-here")
    assert missing.returncode == 127


def test_exec_into_a_container_not_running_is_refused(node: Node) -> None:
    node.runtime.alive.discard((NS, POD, "side"))
    got = node.kubectl("exec", POD, "-c", "side", "--", "true")
    assert got.returncode != 0 and "not running" in got.stderr


def _healthz(port: int, context: ssl.SSLContext) -> str:
    """The node's answer to GET /healthz, or why there was none (with TLS 1.3 the server
    checks the client's certificate after the client's handshake ended: the refusal comes as an
    alert on the first read)."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            return tls.recv(4096).decode() or "closed"
    except (ssl.SSLError, ConnectionError) as exc:
        return f"refused: {exc}"


def test_only_the_api_servers_client_certificate_gets_in(node: Node, tmp_path: Path) -> None:
    assert _healthz(node.server.port, node.pki.client_context()).startswith("HTTP/1.1 200")
    anonymous = ssl.create_default_context(cafile=str(node.pki.serving_ca))
    assert not _healthz(node.server.port, anonymous).startswith("HTTP")
    stranger = KubeletPki.create(tmp_path)  # a certificate another CA signed
    other = ssl.create_default_context(cafile=str(node.pki.serving_ca))
    other.load_cert_chain(stranger.client_cert, stranger.client_key)
    assert not _healthz(node.server.port, other).startswith("HTTP")
