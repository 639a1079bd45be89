"""Probes without a cluster: reading a probe, its state machine on an injected clock, a pod's
containers killed and restarted by a fake prober, and the real exec, HTTP and TCP checks."""

from __future__ import annotations

import http.server
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainop_core.node.containers import ContainerRun, Launch
from trainop_core.node.pki import KubeletPki
from trainop_core.node.podenv import ConfigError
from trainop_core.node.podrun import PodRun
from trainop_core.node.probecheck import exec_check, host_dial, http_check, tcp_check
from trainop_core.node.probes import (
    OUTPUT_LIMIT,
    ContainerProbes,
    ExecAction,
    HttpGetAction,
    Probe,
    TcpAction,
    container_probes,
)
from trainop_core.testing.builders import wait_for

Obj = dict[str, Any]
FIELD = "spec.containers[0]"


def probes_of(**container: Any) -> list[Probe]:
    return container_probes({"name": "main", **container}, FIELD)


def exec_probe(**fields: Any) -> Obj:
    return {"exec": {"command": ["true"]}, **fields}


# --- reading a probe -------------------------------------------------------------------------
def test_a_probe_gets_a_kubelets_defaults_and_a_port_may_be_named() -> None:
    ports = [{"name": "http", "containerPort": 8080}]
    http = {"httpGet": {"port": "http", "path": "healthz", "httpHeaders": [
        {"name": "X-Probe", "value": "1"}]}}  # fmt: skip
    (probe,) = probes_of(readinessProbe=http, ports=ports)
    assert (probe.initial_delay, probe.period, probe.timeout) == (0, 10, 1)
    assert (probe.success_threshold, probe.failure_threshold, probe.grace) == (1, 3, None)
    assert probe.action == HttpGetAction("", 8080, "/healthz", "HTTP", (("X-Probe", "1"),))
    (tcp,) = probes_of(livenessProbe={"tcpSocket": {"port": 22, "host": "10.0.0.1"}})
    assert tcp.action == TcpAction("10.0.0.1", 22) and tcp.field == f"{FIELD}.livenessProbe"


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("readinessProbe", exec_probe(periodSeconds=0), "readinessProbe.periodSeconds"),
        ("livenessProbe", exec_probe(timeoutSeconds=-1), "livenessProbe.timeoutSeconds"),
        ("readinessProbe", exec_probe(failureThreshold=2**31), "failureThreshold"),
        ("readinessProbe", exec_probe(initialDelaySeconds=True), "initialDelaySeconds"),
        ("livenessProbe", exec_probe(successThreshold=2), "livenessProbe.successThreshold"),
        ("startupProbe", exec_probe(successThreshold=3), "startupProbe.successThreshold"),
        ("readinessProbe", exec_probe(terminationGracePeriodSeconds=5), "terminationGrace"),
        ("livenessProbe", {"grpc": {"port": 9000}}, "livenessProbe.grpc"),
        ("livenessProbe", {"exec": {"command": ["a"]}, "tcpSocket": {"port": 1}}, "livenessProbe"),
        ("livenessProbe", {"periodSeconds": 5}, "livenessProbe"),
        ("livenessProbe", {"exec": {"command": []}}, "livenessProbe.exec.command"),
        ("readinessProbe", {"tcpSocket": {"port": 70000}}, "readinessProbe.tcpSocket.port"),
        ("readinessProbe", {"httpGet": {"port": "admin"}}, "readinessProbe.httpGet.port"),
        ("readinessProbe", {"httpGet": {"port": 80, "scheme": "FTP"}}, "httpGet.scheme"),
        (
            "readinessProbe",
            {"httpGet": {"port": 80, "httpHeaders": [{"name": "X", "value": "a\r\nInjected: 1"}]}},
            "httpGet.httpHeaders[0]",
        ),
    ],
    ids=[
        "a period of 0 is refused",
        "a negative timeout is refused",
        "a threshold beyond int32 is refused",
        "a boolean is not a number of seconds",
        "a liveness probe needs one success",
        "so does a startup probe",
        "a readiness probe has no grace period",
        "grpc probes are refused, not ignored",
        "two handlers are refused",
        "no handler is refused",
        "an empty command is refused",
        "a port beyond 65535 is refused",
        "a port name the container lacks is refused",
        "only HTTP and HTTPS are schemes",
        "a header cannot inject another",
    ],
)
def test_a_hostile_probe_is_refused_naming_its_field(kind: str, spec: Obj, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        probes_of(**{kind: spec})


# --- the state machine, on an injected clock -------------------------------------------------
def a_probe(kind: str, **fields: Any) -> Probe:
    return Probe(kind, f"{FIELD}.{kind}", ExecAction(("true",)), **fields)


def test_readiness_waits_its_initial_delay_then_runs_each_period_never_twice_at_once() -> None:
    probes = ContainerProbes([a_probe("readinessProbe", initial_delay=5, period=2)], started=100)
    assert not probes.ready and probes.due(104.9) == []
    assert [p.kind for p in probes.due(105)] == ["readinessProbe"]
    assert probes.due(108) == []  # still in flight
    assert probes.record("readinessProbe", True) is None and probes.ready
    assert probes.due(106.9) == [] and len(probes.due(107)) == 1


def test_readiness_follows_its_success_and_failure_thresholds() -> None:
    probe = a_probe("readinessProbe", success_threshold=2, failure_threshold=2, period=1)
    probes = ContainerProbes([probe], started=0)
    seen = []
    for now, ok in enumerate([True, True, False, True, False, False, True, True]):
        assert probes.due(float(now))
        probes.record("readinessProbe", ok)
        seen.append(probes.ready)
    assert seen == [False, True, True, True, True, False, False, True]


def test_a_startup_probe_gates_the_others_and_runs_no_more_once_passed() -> None:
    kinds = ("startupProbe", "livenessProbe", "readinessProbe")
    probes = ContainerProbes([a_probe(k, period=1) for k in kinds], started=0)
    assert [p.kind for p in probes.due(0)] == ["startupProbe"] and not probes.started
    probes.record("startupProbe", False)
    assert [p.kind for p in probes.due(1)] == ["startupProbe"]
    probes.record("startupProbe", True)
    assert probes.started and not probes.ready
    assert sorted(p.kind for p in probes.due(2)) == ["livenessProbe", "readinessProbe"]


@pytest.mark.parametrize("kind", ["startupProbe", "livenessProbe"])
def test_a_failed_startup_or_liveness_probe_kills_after_its_failure_threshold(kind: str) -> None:
    probes = ContainerProbes([a_probe(kind, failure_threshold=3, period=1)], started=0)
    verdicts = []
    for now in range(3):
        assert probes.due(float(now))
        verdicts.append(probes.record(kind, False))
    assert verdicts[:2] == [None, None] and verdicts[2] is not None
    assert verdicts[2].kind == kind and not probes.ready and probes.due(10) == []


# --- a pod's containers with a fake prober ---------------------------------------------------
class FakeProber:
    """Answers every probe with `answer`; keeps the events."""

    def __init__(self) -> None:
        self.answer = (True, "")
        self.checked: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def check(self, run: ContainerRun, probe: Probe, done: Callable[[bool, str], None]) -> None:
        self.checked.append(probe.kind)
        done(*self.answer)

    def event(self, container: str, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[PodRun, FakeProber]]:
    liveness = {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 2,
                "terminationGracePeriodSeconds": 1}  # fmt: skip
    container = {"name": "main", "command": ["sleep"], "livenessProbe": liveness,
                 "readinessProbe": {"exec": {"command": ["check"]}, "periodSeconds": 1,
                                    "failureThreshold": 1}}  # fmt: skip
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [container]}}

    def launcher(spec: Obj, restart: int) -> Launch:
        argv = (sys.executable, "-c", "import time; time.sleep(60)")
        return Launch(argv, {"PATH": "/usr/bin:/bin"}, str(tmp_path), tmp_path / f"{restart}.log")

    prober = FakeProber()
    run = PodRun(pod, launcher, "127.0.0.1", "127.0.0.1", prober)
    yield run, prober
    run.kill()


def polled(run: PodRun, now: float, check: Callable[[], object]) -> object:
    """Poll `run` at `now` (the pod's clock), then say whether `check` holds."""
    run.poll(now)
    return check()


def test_readiness_drives_the_containers_ready_and_the_pods_conditions(
    sleeper: tuple[PodRun, FakeProber],
) -> None:
    run, prober = sleeper
    run.poll(0.0)  # starts the container; its probes are due at once
    assert sorted(prober.checked) == ["livenessProbe", "readinessProbe"]
    assert run.status()["containerStatuses"][0]["ready"] is False  # no result counted yet
    run.poll(0.1)
    status = run.status()
    assert status["containerStatuses"][0]["ready"] is True
    assert {c["type"]: c["status"] for c in status["conditions"]}["ContainersReady"] == "True"
    prober.answer = (False, "not yet")
    for now in (0.5, 1.1, 1.2):  # nothing due before the period; then one failure counted
        run.poll(now)
    assert len(prober.checked) == 4
    conditions = {c["type"]: c["status"] for c in run.status()["conditions"]}
    assert conditions["Ready"] == "False" and conditions["ContainersReady"] == "False"
    assert ("Warning", "Unhealthy", "Readiness probe failed: not yet") in prober.events
    assert run.main[0].running  # one liveness failure of two: not killed


def test_a_failed_liveness_probe_kills_and_restarts_the_container_with_events(
    sleeper: tuple[PodRun, FakeProber],
) -> None:
    run, prober = sleeper
    run.poll(0.0)
    prober.answer = (False, "stuck")
    for now in (0.1, 1.1, 1.2, 2.1, 2.2):  # two failures counted: the failureThreshold
        run.poll(now)
    killing = ("Normal", "Killing", "Container main failed liveness probe, will be restarted")
    assert killing in prober.events
    assert ("Warning", "Unhealthy", "Liveness probe failed: stuck") in prober.events
    container = run.main[0]
    wait_for(lambda: polled(run, 2.3, lambda: "waiting" in container.state), timeout=30)
    assert container.last_state["terminated"]["exitCode"] == 143  # SIGTERM, within its grace
    assert container.status()["ready"] is False
    prober.answer = (True, "")
    wait_for(lambda: polled(run, 10.0, lambda: container.running), timeout=30)
    assert container.restart_count == 1 and container.probes is not None


# --- the checks themselves -------------------------------------------------------------------
def test_an_exec_check_passes_on_exit_0_keeps_10_kib_of_output_and_is_ended_by_its_timeout(
    tmp_path: Path,
) -> None:
    env, cwd = {"PATH": "/usr/bin:/bin"}, str(tmp_path)
    loud = [sys.executable, "-c", "import sys; sys.stdout.write('x' * 100000); sys.exit(3)"]
    ok, message = exec_check(loud, env, cwd, 10, loud)
    assert not ok and message == "x" * OUTPUT_LIMIT
    assert exec_check(["true"], env, cwd, 10, ["true"]) == (True, "")
    assert exec_check(["true"], env, cwd, 2**31 - 1, ["true"]) == (True, "")  # no overflow
    ok, message = exec_check(["sleep", "600"], env, cwd, 0.2, ["sleep", "600"])
    assert not ok and message == "command 'sleep 600' timed out"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 500 if self.path == "/fail" else 200
        body = b"y" * 50000 if self.path == "/big" else self.headers.get("X-Probe", "").encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_an_http_check_passes_below_400_sends_headers_and_reads_at_most_10_kib(web: int) -> None:
    def get(path: str, headers: tuple[tuple[str, str], ...] = ()) -> tuple[bool, str]:
        return http_check(host_dial, "127.0.0.1", HttpGetAction("", web, path, "HTTP", headers), 5)

    assert get("/", (("X-Probe", "hello"),)) == (True, "hello")
    assert get("/fail") == (False, "HTTP probe failed with statuscode: 500")
    ok, body = get("/big")
    assert ok and len(body) == OUTPUT_LIMIT


def test_an_https_check_does_not_verify_the_servers_certificate(tmp_path: Path) -> None:
    cert, key = KubeletPki.create(tmp_path).node_serving("elsewhere", ["elsewhere.invalid"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)  # signed by a CA the prober has never seen, another name
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        action = HttpGetAction("", server.server_address[1], "/", "HTTPS", (("X-Probe", "tls"),))
        assert http_check(host_dial, "127.0.0.1", action, 5) == (True, "tls")
    finally:
        server.shutdown()
        server.server_close()


def test_a_tcp_check_passes_on_connect_and_says_why_it_failed() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert tcp_check(host_dial, "127.0.0.1", TcpAction("", port), 5) == (True, "")
    ok, message = tcp_check(host_dial, "127.0.0.1", TcpAction("", port), 5)
    assert not ok and message == f"dial tcp 127.0.0.1:{port}: connect: connection refused"
