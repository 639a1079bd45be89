"""Container probes as a kubelet reads and counts them: pure, no I/O, time given by the caller.

:func:`container_probes` reads a container's ``startupProbe``, ``livenessProbe`` and
``readinessProbe`` into :class:`Probe` values, refusing what it cannot run with a
:class:`~trainop_core.node.podenv.ConfigError` naming the field (the container then waits,
saying why). :class:`ContainerProbes` is one run of a container's probes: which are due, and what
their results mean, by Kubernetes' documented rules:

- no probe runs before ``initialDelaySeconds`` after the container started, then one every
  ``periodSeconds`` (never two of one probe at once);
- a probe passes after ``successThreshold`` consecutive successes and fails after
  ``failureThreshold`` consecutive failures; readiness starts failed, liveness passed;
- while a startup probe has not passed, the others do not run and the container is not
  ``started``; once it passes it never runs again for that run of the container;
- a failed startup or liveness probe means the container is killed (and restarted by the pod's
  restartPolicy); a readiness probe only says whether the container is ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainop_core.node.podenv import ConfigError

Obj = dict[str, Any]
KINDS = ("startupProbe", "livenessProbe", "readinessProbe")
LABELS = {"startupProbe": "Startup", "livenessProbe": "Liveness", "readinessProbe": "Readiness"}
INT32_MAX = 2**31 - 1
OUTPUT_LIMIT = 10 * 1024  # bytes of an exec probe's output or an HTTP body read (a kubelet's)
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class HttpGetAction:
    host: str  # "" means the pod's IP
    port: int
    path: str
    scheme: str  # HTTP or HTTPS
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TcpAction:
    host: str  # "" means the pod's IP
    port: int


Action = ExecAction | HttpGetAction | TcpAction


@dataclass(frozen=True)
class Probe:
    """One probe of a container, checked and defaulted."""

    kind: str  # one of KINDS
    field: str  # its path, e.g. spec.containers[0].livenessProbe
    action: Action
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3
    grace: int | None = None  # the probe's terminationGracePeriodSeconds

    @property
    def label(self) -> str:
        """``Liveness``, ``Readiness`` or ``Startup``, as a kubelet's messages say it."""
        return LABELS[self.kind]


def container_probes(container: Obj, field: str) -> list[Probe]:
    """The probes of `container` (whose path is `field`, e.g. ``spec.containers[0]``).
    Raises ConfigError naming the first field it cannot accept."""
    found = []
    for kind in KINDS:
        spec = container.get(kind)
        if spec is not None:
            found.append(read_probe(kind, spec, f"{field}.{kind}", container))
    return found


def read_probe(kind: str, spec: object, field: str, container: Obj) -> Probe:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{field}: must be an object")
    ints = {
        "initial_delay": _int(spec, "initialDelaySeconds", field, 0, 0),
        "period": _int(spec, "periodSeconds", field, 10, 1),
        "timeout": _int(spec, "timeoutSeconds", field, 1, 1),
        "success_threshold": _int(spec, "successThreshold", field, 1, 1),
        "failure_threshold": _int(spec, "failureThreshold", field, 3, 1),
    }
    if kind != "readinessProbe" and ints["success_threshold"] != 1:
        raise ConfigError(f"{field}.successThreshold: must be 1 for a {LABELS[kind].lower()} probe")
    grace = None
    if spec.get("terminationGracePeriodSeconds") is not None:
        if kind == "readinessProbe":
            raise ConfigError(f"{field}.terminationGracePeriodSeconds: not allowed on a readiness "
                              "probe")  # fmt: skip
        grace = _int(spec, "terminationGracePeriodSeconds", field, 0, 0)
    return Probe(kind, field, _action(spec, field, container), grace=grace, **ints)


def _int(spec: Mapping[str, Any], key: str, field: str, default: int, minimum: int) -> int:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field}.{key}: must be an integer, not {value!r}")
    if not minimum <= value <= INT32_MAX:
        raise ConfigError(f"{field}.{key}: must be from {minimum} to {INT32_MAX}, not {value}")
    return value


def _action(spec: Mapping[str, Any], field: str, container: Obj) -> Action:
    given = [key for key in HANDLERS if spec.get(key) is not None]
    if len(given) != 1:
        raise ConfigError(f"{field}: must have exactly one of {', '.join(HANDLERS)}, not "
                          f"{len(given)}")  # fmt: skip
    key = given[0]
    handler, where = spec[key], f"{field}.{key}"
    if key == "grpc":
        raise ConfigError(f"{where}: gRPC probes are not supported on process nodes (use exec, "
                          "httpGet or tcpSocket)")  # fmt: skip
    if not isinstance(handler, Mapping):
        raise ConfigError(f"{where}: must be an object")
    if key == "exec":
        return ExecAction(_command(handler.get("command"), f"{where}.command"))
    host = _str(handler.get("host"), f"{where}.host")
    port = _port(handler.get("port"), f"{where}.port", container)
    if key == "tcpSocket":
        return TcpAction(host, port)
    scheme = _str(handler.get("scheme"), f"{where}.scheme") or "HTTP"
    if scheme not in ("HTTP", "HTTPS"):
        raise ConfigError(f"{where}.scheme: must be HTTP or HTTPS, not {scheme!r}")
    path = _str(handler.get("path"), f"{where}.path") or "/"
    path = path if path.startswith("/") else f"/{path}"
    if any(ord(c) < 33 or ord(c) == 127 for c in path):
        raise ConfigError(f"{where}.path: must not hold spaces or control characters")
    headers = _headers(handler.get("httpHeaders"), f"{where}.httpHeaders")
    return HttpGetAction(host, port, path, scheme, headers)


def _command(value: object, field: str) -> tuple[str, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(word, str) for word in value)):  # fmt: skip
        raise ConfigError(f"{field}: must be a non-empty list of strings")
    return tuple(value)


def _str(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{field}: must be a string, not {value!r}")
    return value


def _port(value: object, field: str, container: Obj) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 65535:
            raise ConfigError(f"{field}: must be from 1 to 65535, not {value}")
        return value
    if isinstance(value, str) and value:
        if value.isdigit():
            return _port(int(value), field, container)
        for port in container.get("ports") or []:
            if isinstance(port, Mapping) and port.get("name") == value:
                return _port(port.get("containerPort"), f"{field} ({value!r})", container)
        raise ConfigError(f"{field}: the container has no port named {value!r}")
    raise ConfigError(f"{field}: must be a port number or a container port's name")


def _headers(value: object, field: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{field}: must be a list of {{name, value}}")
    headers = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: must be an object with name and value")
        name, text = _str(item.get("name"), f"{where}.name"), _str(item.get("value"), where)
        if not name or any(c in name for c in ":\r\n \t") or any(c in text for c in "\r\n"):
            raise ConfigError(f"{where}: not a valid HTTP header")
        headers.append((name, text))
    return tuple(headers)


class ProbeState:
    """One probe of one run of a container: when it is next due and its consecutive results."""

    def __init__(self, probe: Probe, started: float) -> None:
        self.probe = probe
        self.next_at = started + probe.initial_delay
        self.in_flight = False
        self.passing = probe.kind == "livenessProbe"  # a kubelet's initial results
        self.successes = self.failures = 0
        self.finished = False  # a startup probe that passed, or a probe whose container is killed

    def due(self, now: float) -> bool:
        return not self.finished and not self.in_flight and now >= self.next_at

    def begin(self, now: float) -> None:
        self.in_flight = True
        self.next_at = now + self.probe.period

    def record(self, ok: bool) -> None:
        """Count one result and move `passing` by the thresholds."""
        self.in_flight = False
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.probe.success_threshold:
                self.passing = True
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.failures >= self.probe.failure_threshold:
                self.passing = False


class ContainerProbes:
    """The probes of one run of a container, started at `started` (a monotonic time)."""

    def __init__(self, probes: Sequence[Probe], started: float) -> None:
        self.states = {p.kind: ProbeState(p, started) for p in probes}
        self.killed = False  # a startup or liveness probe failed: the container is being killed

    @property
    def started(self) -> bool:
        """Has the startup probe passed (or is there none)?"""
        startup = self.states.get("startupProbe")
        return startup is None or startup.passing

    @property
    def ready(self) -> bool:
        readiness = self.states.get("readinessProbe")
        passing = readiness is None or readiness.passing
        return self.started and passing and not self.killed

    def due(self, now: float) -> list[Probe]:
        """The probes to run now, each marked in flight until its :meth:`record`."""
        kinds = ("startupProbe",) if not self.started else ("livenessProbe", "readinessProbe")
        due = [self.states[k] for k in kinds if k in self.states and self.states[k].due(now)]
        for state in due:
            state.begin(now)
        return [state.probe for state in due]

    def record(self, kind: str, ok: bool) -> Probe | None:
        """Count a result of probe `kind`; returns the probe when its failure means the container
        must be killed (startup or liveness over its failureThreshold), else None."""
        state = self.states.get(kind)
        if state is None or state.finished:
            return None
        state.record(ok)
        if kind == "startupProbe" and state.passing:
            state.finished = True
        killing = kind != "readinessProbe" and state.failures >= state.probe.failure_threshold
        if not killing:
            return None
        self.killed = True
        for held in self.states.values():
            held.finished = True
        return state.probe


__all__ = [
    "OUTPUT_LIMIT",
    "Action",
    "ContainerProbes",
    "ExecAction",
    "HttpGetAction",
    "Probe",
    "ProbeState",
    "TcpAction",
    "container_probes",
]
