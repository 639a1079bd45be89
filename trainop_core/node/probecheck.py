"""Running one probe: an exec in the container, an HTTP GET or a TCP connect to the pod.

Each check is bounded: it ends by its timeout (an exec's processes are killed; a connection is
shut down), reads at most :data:`~trainop_core.node.probes.OUTPUT_LIMIT` bytes of output or body,
and returns ``(ok, message)`` instead of raising. Connections are opened by a `dial` the node
gives (its pod network's: the pods' addresses are reachable from the network's hub, not from this
machine's own namespace).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import selectors
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor

from trainop_core.node.containers import ContainerRun, Launch, in_container
from trainop_core.node.events import EventRecorder, PodRef
from trainop_core.node.probes import OUTPUT_LIMIT, ExecAction, HttpGetAction, Probe, TcpAction
from trainop_core.node.registration import VERSION

Dial = Callable[[str, int, float], socket.socket]  # (host, port, timeout) -> connected socket
Result = tuple[bool, str]
USER_AGENT = f"kube-probe/{VERSION}"  # a kubelet says kube-probe/<its version>


def exec_check(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout: float, command: Sequence[str]
) -> Result:
    """Run `argv` (the probe's `command` wrapped into the container); success is exit code 0.
    Its output (stdout and stderr, at most OUTPUT_LIMIT bytes kept) is the message."""
    proc = subprocess.Popen(
        list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    output = b""
    try:
        output = _read_until(proc.stdout.fileno(), deadline)
        code = proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        code = None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the command's leftovers, or itself if late
        proc.wait()
        proc.stdout.close()
    text = output.decode("utf-8", "replace").strip()
    if code is None:
        return False, f"command {' '.join(command)!r} timed out"
    if code != 0 and not text:
        text = f"command exited with {code}"
    return code == 0, text


def _read_until(fd: int, deadline: float) -> bytes:
    """Read `fd` to its end or the deadline, keeping the first OUTPUT_LIMIT bytes."""
    kept = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(min(left, 1.0)):  # in steps: a huge timeout overflows epoll
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            kept += chunk[: max(0, OUTPUT_LIMIT - len(kept))]
    return bytes(kept)


def tcp_check(dial: Dial, host: str, action: TcpAction, timeout: float) -> Result:
    """Success is a TCP connection opened within the timeout."""
    target = action.host or host
    try:
        dial(target, action.port, timeout).close()
    except OSError as err:
        return False, f"dial tcp {target}:{action.port}: {_reason(err)}"
    return True, ""


def http_check(dial: Dial, host: str, action: HttpGetAction, timeout: float) -> Result:
    """GET the action's URL (HTTPS unverified, as a kubelet does); success is a status from 200
    to 399 (a redirect is not followed). At most OUTPUT_LIMIT bytes of the body are read."""
    target = action.host or host
    url = f"{action.scheme.lower()}://{target}:{action.port}{action.path}"
    conn = _Connection(dial, target, action.port, timeout, action.scheme == "HTTPS")
    watchdog = threading.Timer(timeout, conn.abort)
    watchdog.start()
    try:
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        for name, value in action.headers:  # the spec's headers replace the defaults
            headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
            headers[name] = value
        conn.request("GET", action.path, headers=headers)
        response = conn.getresponse()
        body = response.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException, ValueError) as err:
        late = watchdog.finished.is_set()
        return False, f"Get {url!r}: " + ("timed out" if late else _reason(err))
    finally:
        watchdog.cancel()
        conn.close()
    if 200 <= response.status < 400:
        return True, body
    return False, f"HTTP probe failed with statuscode: {response.status}"


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection over a socket from `dial`, which `abort` may shut from any thread."""

    def __init__(self, dial: Dial, host: str, port: int, timeout: float, tls: bool) -> None:
        super().__init__(host, port, timeout=timeout)
        self._dial, self._tls = dial, tls
        self._raw: socket.socket | None = None

    def connect(self) -> None:
        self._raw = self._dial(self.host, self.port, float(self.timeout or 1))
        self.sock = self._raw
        if self._tls:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            self.sock = context.wrap_socket(self._raw, server_hostname=self.host)

    def abort(self) -> None:
        if self._raw is not None:
            with contextlib.suppress(OSError):
                self._raw.shutdown(socket.SHUT_RDWR)


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return f"connect: {err.strerror.lower()}"
    return str(err) or type(err).__name__


def host_dial(host: str, port: int, timeout: float) -> socket.socket:
    """A connection from this machine's own network (pods sharing it have IP 127.0.0.1)."""
    return socket.create_connection((host, port), timeout=timeout)


class PodProber:
    """Runs one pod's probes on the node's bounded pool of probe threads (a
    :class:`~trainop_core.node.podrun.Prober`): exec through the container's own way in (its
    cgroups, mounts and network, as ``kubectl exec``), HTTP and TCP to the pod's IP by `dial`;
    its events go to the node's recorder."""

    def __init__(
        self, pool: Executor, dial: Dial, pod_ip: str, events: EventRecorder, pod: PodRef
    ) -> None:
        self.pool, self.dial, self.pod_ip, self.events, self.pod = pool, dial, pod_ip, events, pod

    def check(self, run: ContainerRun, probe: Probe, done: Callable[[bool, str], None]) -> None:
        launch = run.launch
        if launch is None:
            done(False, "the container has not started")
            return
        env = run.env(launch)
        with contextlib.suppress(RuntimeError):  # the pool is shut down: the node is stopping
            self.pool.submit(self._run, launch, env, probe, done)

    def _run(
        self, launch: Launch, env: dict[str, str], probe: Probe, done: Callable[[bool, str], None]
    ) -> None:
        action, timeout = probe.action, float(probe.timeout)
        try:
            if isinstance(action, ExecAction):
                argv = in_container(launch, action.command)
                result = exec_check(argv, env, launch.cwd, timeout, action.command)
            elif isinstance(action, HttpGetAction):
                result = http_check(self.dial, self.pod_ip, action, timeout)
            else:
                result = tcp_check(self.dial, self.pod_ip, action, timeout)
        except Exception as exc:  # a probe that cannot run fails; the node goes on
            result = (False, f"probe error: {exc}")
        done(*result)

    def event(self, container: str, kind: str, reason: str, message: str) -> None:
        self.events.record(self.pod, container, kind, reason, message)
