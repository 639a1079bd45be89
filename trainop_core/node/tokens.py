"""Bound ServiceAccount tokens for pods' projected volumes, got as a kubelet's token manager gets
them: the TokenRequest API (``POST .../serviceaccounts/SA/token``) with the volume's audience and
expirationSeconds, bound to the pod (a token of a deleted pod stops working).

A token is kept and handed out again until it is due for refresh: when 80 % of its lifetime has
passed, or 24 hours, whichever comes first (the kubelet's rule). The node then rewrites the
pod's token files (:func:`trainop_core.node.volumes.write_tokens`), so a long-running pod never
holds an expired one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from trainop_core.node.podenv import ConfigError
from trainop_core.testing.rest import Obj, RestError

#: the bounds the API server puts on a projected token's expirationSeconds
MIN_EXPIRATION, MAX_EXPIRATION = 600, 2**32
DEFAULT_EXPIRATION = 3600
REFRESH_FRACTION, REFRESH_MAX_AGE = 0.8, 24 * 3600.0


@dataclass(frozen=True)
class TokenRequest:
    """One projected token of one pod."""

    namespace: str
    service_account: str
    audience: str
    expiration_seconds: int
    pod_name: str
    pod_uid: str


class TokenSource(Protocol):
    """Gives pods their ServiceAccount tokens."""

    def token(self, request: TokenRequest) -> bytes:
        """The token, the one given before while it is not due for refresh. May do I/O; raises
        ConfigError when the API refuses (the container then waits, saying why)."""
        ...


def check_expiration(value: object, field: str) -> int:
    """`value` as a token's expirationSeconds; ConfigError naming `field` if out of bounds."""
    if value is None:
        return DEFAULT_EXPIRATION
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{field}: must be an integer number of seconds, not {value!r}")
    if not MIN_EXPIRATION <= value <= MAX_EXPIRATION:
        raise ConfigError(
            f"{field}: {value} seconds is out of bounds ({MIN_EXPIRATION} to {MAX_EXPIRATION})"
        )
    return value


class Creates(Protocol):
    """What the tokens need of an API client (:class:`~trainop_core.testing.rest.Rest`)."""

    def create(self, path: str, body: Obj) -> Obj:
        """POST `body` to `path`; the answer. I/O; raises RestError when refused."""
        ...


@dataclass
class _Held:
    token: bytes
    refresh_at: float


class ServiceAccountTokens:
    """A TokenSource reading the TokenRequest API as the node; `clock` is a seam for tests."""

    def __init__(self, rest: Creates, clock: Callable[[], float] = time.time) -> None:
        self.rest, self.clock = rest, clock
        self._held: dict[TokenRequest, _Held] = {}

    def token(self, request: TokenRequest) -> bytes:
        held = self._held.get(request)
        if held is None or self.clock() >= held.refresh_at:
            held = self._request(request)
            self._held[request] = held
        return held.token

    def due(self, pod_uid: str) -> bool:
        """Is a token of pod `pod_uid` due for refresh? (No I/O.)"""
        now = self.clock()
        return any(r.pod_uid == pod_uid and now >= h.refresh_at for r, h in self._held.items())

    def forget(self, pod_uid: str) -> None:
        """Drop the pod's tokens (it is gone)."""
        for request in [r for r in self._held if r.pod_uid == pod_uid]:
            del self._held[request]

    def _request(self, request: TokenRequest) -> _Held:
        path = (
            f"/api/v1/namespaces/{request.namespace}/serviceaccounts/"
            f"{request.service_account}/token"
        )
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [request.audience] if request.audience else None,
                "expirationSeconds": request.expiration_seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": request.pod_name,
                                   "uid": request.pod_uid},
            },
        }  # fmt: skip
        issued = self.clock()
        try:
            status = self.rest.create(path, body).get("status") or {}
        except RestError as err:
            raise ConfigError(
                f"cannot get a token for serviceaccount {request.namespace}/"
                f"{request.service_account}: {err}"
            ) from err
        lifetime = _lifetime(status.get("expirationTimestamp"), issued, request)
        refresh = min(lifetime * REFRESH_FRACTION, REFRESH_MAX_AGE)
        return _Held(str(status.get("token", "")).encode(), issued + refresh)


def _lifetime(stamp: object, issued: float, request: TokenRequest) -> float:
    """Seconds the token is valid from `issued` (the requested ones when the API says none)."""
    try:
        expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float(request.expiration_seconds)
    return max(0.0, expires - issued)
