"""The one place that says how decorators are configured: a `DecoratorConfiguration` file.

```yaml
apiVersion: trainop.kubeflow.org/v1alpha1
kind: DecoratorConfiguration
entryPoints: true              # run the installed `trainop.pod_decorators` plugins (default)
decorators:                    # built-in in-process decorators, applied in this order
  - nodeSelector: {pool: training}
  - tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  - env: {SITE: lab-a}
  - sidecar: {container: {name: log-shipper, image: busybox}, replicaTypes: [Worker]}
servers:                       # decorator servers, called in this order (see `review`)
  - name: site-policy
    url: https://site-policy.kubeflow.svc:8443/decorate
    caBundle: <base64 PEM>     # or caFile: /etc/site-policy/ca.crt
    timeoutSeconds: 10         # 1 to 30, as a Kubernetes webhook's
    failurePolicy: Fail        # or Ignore
    kinds: [PyTorchJob]        # empty: every kind
    namespaceSelector: {matchLabels: {team: vision}}
    objectSelector: {matchExpressions: [{key: site-policy, operator: NotIn, values: ["off"]}]}
```

`load_decorator_config` reads it (bounded like a job file, every problem at once with its field
path) for the operator (`--decorators`), the local and Ray backends (`decorators=`) and `trainop
render` (`--decorators`); all of them default to the file named by `$TRAINOP_DECORATORS`, else to
the installed plugins alone. In-process decorators run in the pure planner; servers are called by
each backend's effects layer (`trainop_core.decorators.decoration`).
"""

from __future__ import annotations

import base64
import binascii
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from trainop_core.api.podtemplate import check_value
from trainop_core.api.reader import parse_yaml, read_file
from trainop_core.api.types import ApiModel, LabelSelector, WireEnum
from trainop_core.decorators.builtin import (
    Env,
    NodeSelector,
    PodDecorator,
    Sidecar,
    Tolerations,
    plugin_decorators,
)
from trainop_core.decorators.selectors import selector_problems
from trainop_core.errors import InvalidConfigError, InvalidJobError, Problem

CONFIG_API_VERSION = "trainop.kubeflow.org/v1alpha1"
CONFIG_KIND = "DecoratorConfiguration"
ENV_VAR = "TRAINOP_DECORATORS"
DEFAULT_RESPONSE_BYTES = 256 * 1024
MAX_RESPONSE_BYTES = 3 * 1024 * 1024
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class FailurePolicy(WireEnum):
    FAIL = "Fail"
    IGNORE = "Ignore"


class SidecarSettings(ApiModel):
    container: dict[str, Any]
    replica_types: list[str] = Field(default_factory=list)


class BuiltinDecorator(ApiModel):
    """One built-in decorator: exactly one of its fields is set."""

    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    env: dict[str, str] | None = None
    sidecar: SidecarSettings | None = None

    def build(self) -> PodDecorator:
        if self.node_selector is not None:
            return NodeSelector(self.node_selector)
        if self.tolerations is not None:
            return Tolerations(self.tolerations)
        if self.env is not None:
            return Env(self.env)
        assert self.sidecar is not None  # checked by `problems`
        return Sidecar(self.sidecar.container, self.sidecar.replica_types)

    def problems(self, path: str) -> list[Problem]:
        chosen = [name for name, value in self.to_dict().items() if value is not None]
        if len(chosen) != 1:
            names = "nodeSelector, tolerations, env, sidecar"
            return [Problem(path, f"set exactly one of {names} (got {len(chosen)})")]
        if self.tolerations is not None:
            return check_value(self.tolerations, "list[V1Toleration]", f"{path}.tolerations")
        if self.sidecar is not None:
            return check_value(self.sidecar.container, "V1Container", f"{path}.sidecar.container")
        return []


class ServerSettings(ApiModel):
    """Where a decorator server is, how far to trust it, and which jobs it sees."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    url: str
    ca_bundle: str | None = None
    ca_file: str | None = None
    timeout_seconds: float = Field(default=10.0, ge=1.0, le=30.0)
    failure_policy: FailurePolicy = FailurePolicy.FAIL
    kinds: list[str] = Field(default_factory=list)
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    max_response_bytes: int = Field(default=DEFAULT_RESPONSE_BYTES, ge=1024, le=MAX_RESPONSE_BYTES)

    def problems(self, path: str) -> list[Problem]:
        problems = _url_problems(self.url, f"{path}.url")
        if self.ca_bundle is not None and not _is_pem_bundle(self.ca_bundle):
            problems.append(Problem(f"{path}.caBundle", "expected base64-encoded PEM certificates"))
        if self.ca_bundle is not None and self.ca_file is not None:
            problems.append(Problem(f"{path}.caFile", "set caBundle or caFile, not both"))
        problems += selector_problems(self.namespace_selector, f"{path}.namespaceSelector")
        return problems + selector_problems(self.object_selector, f"{path}.objectSelector")

    def ca_pem(self) -> str | None:
        """The PEM certificates to trust (None: the system's)."""
        if self.ca_bundle is not None:
            return base64.b64decode(self.ca_bundle).decode()
        if self.ca_file is not None:
            return Path(self.ca_file).read_text()
        return None

    def applies_to_kind(self, kind: str) -> bool:
        return not self.kinds or kind.lower() in {k.lower() for k in self.kinds}


class DecoratorConfig(ApiModel):
    """A whole configuration; `pod_decorators()` builds its in-process part afresh."""

    api_version: str = CONFIG_API_VERSION
    kind: str = CONFIG_KIND
    entry_points: bool = True
    decorators: list[BuiltinDecorator] = Field(default_factory=list)
    servers: list[ServerSettings] = Field(default_factory=list)

    def pod_decorators(self) -> tuple[PodDecorator, ...]:
        """Installed plugins (if `entryPoints`), then the built-in ones, in that order."""
        plugins = plugin_decorators() if self.entry_points else []
        return (*plugins, *(d.build() for d in self.decorators))

    def problems(self) -> list[Problem]:
        problems = []
        if self.api_version != CONFIG_API_VERSION:
            problems.append(Problem("apiVersion", f'expected "{CONFIG_API_VERSION}"'))
        if self.kind != CONFIG_KIND:
            problems.append(Problem("kind", f'expected "{CONFIG_KIND}"'))
        for i, decorator in enumerate(self.decorators):
            problems += decorator.problems(f"decorators[{i}]")
        names: set[str] = set()
        for i, server in enumerate(self.servers):
            problems += server.problems(f"servers[{i}]")
            if server.name in names:
                problems.append(Problem(f"servers[{i}].name", "names must be unique"))
            names.add(server.name)
        return problems


def load_decorator_config(
    source: DecoratorConfig | Mapping[str, Any] | str | Path | None = None,
) -> DecoratorConfig:
    """The configuration every backend uses: `source` (a model, a mapping, or a file path), else
    the file `$TRAINOP_DECORATORS` names, else the default (installed plugins only).

    Raises InvalidConfigError listing every problem with its field path. A relative `caFile`
    resolves against the file's directory."""
    if isinstance(source, DecoratorConfig):
        return source
    if source is None:
        source = os.environ.get(ENV_VAR) or None
        if source is None:
            return DecoratorConfig()
    if isinstance(source, Mapping):
        return _validated(source, "")
    path = Path(source).expanduser()
    try:
        documents = parse_yaml(read_file(path), str(path))
    except InvalidJobError as err:  # the bounded reader's: size, encoding, nesting, ...
        raise InvalidConfigError(err.problems, source=str(path)) from None
    if len(documents) != 1 or not isinstance(documents[0], Mapping):
        raise InvalidConfigError([Problem("", "expected one mapping")], source=str(path))
    config = _validated(documents[0], str(path))
    missing = []
    for i, server in enumerate(config.servers):
        if server.ca_file is not None:
            server.ca_file = str(path.parent / Path(server.ca_file).expanduser())
            if not Path(server.ca_file).is_file():
                missing.append(Problem(f"servers[{i}].caFile", f"no file {server.ca_file}"))
    if missing:
        raise InvalidConfigError(missing, source=str(path))
    return config


def _validated(data: Mapping[str, Any], origin: str) -> DecoratorConfig:
    from trainop_core.api.load import translate

    try:
        config = DecoratorConfig.model_validate(dict(data))
    except ValidationError as err:
        raise InvalidConfigError(translate(err, data), source=origin) from None
    problems = config.problems()
    if problems:
        raise InvalidConfigError(problems, source=origin)
    return config


def _url_problems(url: str, path: str) -> list[Problem]:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError as exc:
        return [Problem(path, f"is not a URL: {exc}")]
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return [Problem(path, "expected https://host[:port]/path")]
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return [Problem(path, "must be https (plain http only to a loopback address)")]
    if parts.username or parts.password or parts.fragment or parts.query:
        return [Problem(path, "must not carry user info, a query or a fragment")]
    return []


def _is_pem_bundle(value: str) -> bool:
    try:
        text = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return "-----BEGIN CERTIFICATE-----" in text
