"""Exec credential plugins (a kubeconfig user's ``exec``), run as client-go runs them.

The command runs with its `args`, the operator's environment plus the plugin's `env`, and
``KUBERNETES_EXEC_INFO`` (an ExecCredential whose spec says the run is not interactive and, with
`provideClusterInfo`, describes the cluster). It prints an ExecCredential of the configured
`apiVersion` (``client.authentication.k8s.io/v1`` or ``v1beta1``) whose status holds a `token`,
or a `clientCertificateData` and `clientKeyData` pair (PEM). The credential is kept until its
`expirationTimestamp` (for ever without one), and the plugin is run again then, or at once when
the server answers 401 to it. A relative command with a path separator is found relative to the
kubeconfig's directory, as client-go does; one without is looked up on $PATH.

The plugin first runs while the operator starts, so one that cannot run (missing command, bad
output) stops the start with a message naming the kubeconfig key. The operator never has a
terminal: `interactiveMode: Always` is refused at start, `IfAvailable` and `Never` run the plugin
with no standard input.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.operator.connection import ConfigError, TransportError

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
KEYS = frozenset(
    {"command", "args", "env", "apiVersion", "installHint", "provideClusterInfo",
     "interactiveMode"}
)  # fmt: skip
RUN_TIMEOUT = 60.0  # seconds a plugin may take (a browser login it cannot do would hang)

#: Makes the TLS context for a client certificate and key (PEM) the plugin gave.
ContextFactory = Callable[[bytes, bytes], ssl.SSLContext]


@dataclass(frozen=True)
class _Credential:
    authorization: str  # "Bearer ..." or "" (a client certificate)
    context: ssl.SSLContext | None  # with the plugin's client certificate, if it gave one
    expires: dt.datetime | None


class ExecCredentials:
    """A user's `exec` plugin: the Authorization value and TLS context of its latest output,
    renewed at expiry or after a 401. Thread-safe; the plugin runs once at construction."""

    def __init__(
        self,
        plugin: Mapping[str, Any],
        *,
        where: str,
        base: Path,
        context: ssl.SSLContext | None,
        make_context: ContextFactory,
        cluster: Mapping[str, Any] | None = None,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
    ) -> None:
        """`where`: the key's path in the kubeconfig, for messages. `context`: the cluster's
        TLS context (used until the plugin gives a certificate). `cluster`: the
        ExecCredential's spec.cluster when `provideClusterInfo` is set."""
        self.where = where
        for key in sorted(set(plugin) - KEYS):
            raise ConfigError(f"{where}.{key} is not an exec plugin setting the operator knows")
        self.api_version = _api_version(plugin, where)
        self.argv = [_command(plugin, where, base), *_strings(plugin, "args", where)]
        self.install_hint = str(plugin.get("installHint") or "")
        self.env = {**os.environ, **_env(plugin, where)}
        spec: dict[str, Any] = {"interactive": False}
        if plugin.get("provideClusterInfo") and cluster is not None:
            spec["cluster"] = dict(cluster)
        self.env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        )
        self.runs = 0
        self._base_context, self._make_context, self._now = context, make_context, now
        self._lock = threading.Lock()
        self._current = self._run()  # a plugin that cannot run stops the start

    def authorization(self) -> str:
        """The Authorization header value ("" when the plugin gave a client certificate)."""
        return self._fresh().authorization

    def context(self) -> ssl.SSLContext:
        """The TLS context for new connections (with the plugin's client certificate, if any)."""
        found = self._fresh().context or self._base_context
        if found is None:
            raise ConfigError(f"{self.where}: a client certificate needs an https server")
        return found

    def refresh(self, authorization: str, context: ssl.SSLContext | None) -> bool:
        """A 401 to what the plugin gave: run it again (unless another thread just did)."""
        with self._lock:
            current = self._current
            if current.authorization == authorization and (
                current.context is None or current.context is context
            ):
                self._current = self._rerun()
            return True

    def _fresh(self) -> _Credential:
        with self._lock:
            expires = self._current.expires
            if expires is not None and self._now() >= expires:
                self._current = self._rerun()
            return self._current

    def _rerun(self) -> _Credential:
        # Once running, a plugin that fails is a failed request (retried later), not a crash.
        try:
            return self._run()
        except ConfigError as exc:
            raise TransportError(str(exc)) from exc

    def _run(self) -> _Credential:
        self.runs += 1
        try:
            done = subprocess.run(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                timeout=RUN_TIMEOUT, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            hint = f" ({self.install_hint.strip()})" if self.install_hint else ""
            raise ConfigError(
                f"{self.where}.command {self.argv[0]!r} cannot run: {exc}{hint}"
            ) from exc
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()[-500:]
            raise ConfigError(
                f"{self.where}.command {self.argv[0]!r} exited with {done.returncode}: {said}"
            )
        return self._credential(done.stdout)

    def _credential(self, output: bytes) -> _Credential:
        what = f"{self.where}.command's output"
        try:
            answer = json.loads(output)
        except ValueError as exc:
            raise ConfigError(f"{what} is not JSON: {exc}") from None
        if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
            raise ConfigError(f"{what}: expected an ExecCredential")
        if answer.get("apiVersion") != self.api_version:
            got = answer.get("apiVersion")
            raise ConfigError(f"{what}: apiVersion {got!r}, expected {self.api_version!r}")
        status = answer.get("status")
        if not isinstance(status, dict):
            raise ConfigError(f"{what}: no status")
        expires = _timestamp(status.get("expirationTimestamp"), what)
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if token and not (cert or key):
            return _Credential(f"Bearer {token}", None, expires)
        if cert and key and not token:
            context = self._make_context(str(cert).encode(), str(key).encode())
            return _Credential("", context, expires)
        raise ConfigError(
            f"{what}: status needs a token, or clientCertificateData and clientKeyData (not both)"
        )


def _api_version(plugin: Mapping[str, Any], where: str) -> str:
    version = plugin.get("apiVersion")
    if version not in API_VERSIONS:
        raise ConfigError(f"{where}.apiVersion {version!r} is not one of {', '.join(API_VERSIONS)}")
    mode = plugin.get("interactiveMode", "IfAvailable")
    if mode == "Always":
        raise ConfigError(
            f"{where}.interactiveMode Always: the operator has no terminal to give the plugin"
        )
    if mode not in ("IfAvailable", "Never"):
        raise ConfigError(f"{where}.interactiveMode {mode!r}: Never, IfAvailable or Always")
    return str(version)


def _command(plugin: Mapping[str, Any], where: str, base: Path) -> str:
    command = plugin.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{where}.command is required (the plugin to run)")
    if os.sep in command and not os.path.isabs(command):
        return str(base / command)
    return command


def _strings(plugin: Mapping[str, Any], key: str, where: str) -> list[str]:
    values = plugin.get(key) or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}.{key} must be a list of strings")
    return list(values)


def _env(plugin: Mapping[str, Any], where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for index, item in enumerate(plugin.get("env") or []):
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)):
            raise ConfigError(f"{where}.env[{index}] needs a name and a value")
        env[item["name"]] = str(item.get("value", ""))
    return env


def _timestamp(value: Any, what: str) -> dt.datetime | None:
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{what}: expirationTimestamp {value!r} is not RFC 3339") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)
