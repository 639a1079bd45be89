"""The metrics endpoint's security: HTTPS, and every scrape authenticated and authorized by the
API server, as controller-runtime's `filters.WithAuthenticationAndAuthorization` (kubebuilder's
scaffold) does.

* Authentication: the request's bearer token goes to the API server in a TokenReview; no token,
  or one the server does not vouch for, is answered 401.
* Authorization: the user the review names, with its groups and extra, goes back in a
  SubjectAccessReview for the non-resource URL of the request (`get` on `/metrics`); a denial is
  answered 403. A ClusterRole granting `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the
  manifests' `training-operator-metrics-reader`) bound to Prometheus's ServiceAccount lets it in.
* A review that fails (the API server unreachable, or refusing the operator's own review) is
  answered 500 and logged: the operator's role needs `create` on both reviews.

Answers are cached as controller-runtime caches them (token reviews 1 minute, allowed access
5 minutes, denied 30 s), so a scrape every few seconds costs the API server almost nothing; only
a digest of the token is kept. The reviews have a request budget of their own (REVIEW_QPS), apart
from the reconciles': a flood of made-up tokens waits on it and slows no job.

Serving certificate: the files `--metrics-cert-name`/`--metrics-cert-key` in `--metrics-cert-path`
(re-read when they change, as cert-manager renews them), else a self-signed one made at start for
`localhost` and 127.0.0.1 and kept in memory (its key passes through a private temporary
directory only while the `ssl` module loads it, which reads keys from files only).
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainop_core.operator.health import Endpoints, Route, parse_bind_address
from trainop_core.operator.kube import ApiError, KubeClient, Resource
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.options import Options
from trainop_core.private_files import write_new

log = logging.getLogger(__name__)
TOKEN_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
TOKEN_TTL = 60.0  # controller-runtime's authentication cache
ALLOW_TTL = 300.0  # ... and its authorization cache, for allowed and denied access
DENY_TTL = 30.0
CACHE_SIZE = 1024  # entries per cache; the oldest goes first
REVIEW_QPS, REVIEW_BURST = 5.0, 10  # the reviews' own client-side rate limit
SELF_SIGNED_HOSTS = ("localhost", "127.0.0.1")
SELF_SIGNED_VALIDITY = timedelta(days=365)
Refusal = tuple[int, str]


def metrics_endpoint(
    options: Options, api: Any, metrics: OperatorMetrics, stop: threading.Event, route: Route
) -> Endpoints:
    """/metrics on --metrics-bind-address: HTTPS behind the API server's authentication and
    authorization, unless --metrics-secure=false. The reviews go out over `api` on a client
    without the lease's fence (every replica serves its metrics) and with a budget of its own:
    scrapers with made-up tokens cannot spend the reconciles' requests."""
    routes = {"/metrics": route}
    if not options.metrics_secure or parse_bind_address(options.metrics_bind_address) is None:
        return Endpoints(options.metrics_bind_address, routes)
    tls: CertFiles | SelfSigned = (
        CertFiles(options.metrics_cert_path, options.metrics_cert_name, options.metrics_cert_key)
        if options.metrics_cert_path
        else SelfSigned()
    )
    client = KubeClient(api, REVIEW_QPS, REVIEW_BURST, metrics, stop)
    return Endpoints(options.metrics_bind_address, routes, tls=tls, guard=ApiServerAuth(client))


class _Cache:
    """A small map whose entries expire; bounded, the oldest entry dropped first."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._items: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any) -> tuple[bool, Any]:
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[0] <= self.clock():
                self._items.pop(key, None)
                return False, None
            return True, hit[1]

    def put(self, key: Any, value: Any, ttl: float) -> None:
        with self._lock:
            self._items.pop(key, None)
            if len(self._items) >= CACHE_SIZE:
                self._items.pop(next(iter(self._items)))
            self._items[key] = (self.clock() + ttl, value)


class ApiServerAuth:
    """A guard for `health.Endpoints`: TokenReview, then SubjectAccessReview (see the module).

    `client` must not be fenced by the lease: every replica serves its metrics."""

    def __init__(self, client: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self._users = _Cache(clock)
        self._decisions = _Cache(clock)

    def __call__(self, method: str, path: str, authorization: str) -> Refusal | None:
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401, "Unauthorized"
        try:
            user = self._authenticate(token)
        except ApiError as exc:
            log.warning("metrics: TokenReview failed: %s", exc)
            return 500, "Authentication failed"
        if user is None:
            return 401, "Unauthorized"
        name = str(user.get("username", ""))
        try:
            allowed = self._authorize(user, method.lower(), path)
        except ApiError as exc:
            log.warning("metrics: SubjectAccessReview for %s failed: %s", name, exc)
            return 500, f"Authorization for user {name} failed"
        return None if allowed else (403, f"Authorization denied for user {name}")

    def _authenticate(self, token: str) -> dict[str, Any] | None:
        """The user the API server says `token` is (None: not authenticated)."""
        key = hashlib.sha256(token.encode()).digest()
        hit, user = self._users.get(key)
        if hit:
            return user  # type: ignore[no-any-return]  # what put() stored below
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview"}
        answer = self.client.create(TOKEN_REVIEWS, "", {**review, "spec": {"token": token}})
        status = answer.get("status") or {}
        user = status.get("user") if status.get("authenticated") else None
        self._users.put(key, user, TOKEN_TTL)
        return user

    def _authorize(self, user: dict[str, Any], verb: str, path: str) -> bool:
        groups = tuple(user.get("groups") or ())
        extra = {k: list(v) for k, v in (user.get("extra") or {}).items()}
        key = (
            user.get("username"),
            user.get("uid"),
            groups,
            repr(sorted(extra.items())),
            verb,
            path,
        )
        hit, allowed = self._decisions.get(key)
        if hit:
            return bool(allowed)
        spec = {
            "user": user.get("username", ""),
            "uid": user.get("uid", ""),
            "groups": list(groups),
            "extra": extra,
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
        answer = self.client.create(SUBJECT_ACCESS_REVIEWS, "", {**review, "spec": spec})
        allowed = bool((answer.get("status") or {}).get("allowed"))
        self._decisions.put(key, allowed, ALLOW_TTL if allowed else DENY_TTL)
        return allowed


# --- the serving certificate ----------------------------------------------------------------
def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS 1.2+ server context for this certificate (chain) and key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory() as tmp:  # private (0700), removed on the way out
        cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        write_new(cert_file, cert_pem)
        write_new(key_file, key_pem)
        context.load_cert_chain(str(cert_file), str(key_file))
    return context


class SelfSigned:
    """A self-signed certificate made once, at start; `self()` is its context."""

    def __init__(self, hosts: tuple[str, ...] = SELF_SIGNED_HOSTS) -> None:
        from trainop_core.operator.webhook.certs import new_ca, new_serving

        ca = new_ca(SELF_SIGNED_VALIDITY)
        pair = new_serving(ca, hosts, SELF_SIGNED_VALIDITY)
        self.cert_pem = pair.cert_pem + ca.cert_pem  # the chain a client may pin
        self._context = server_context(self.cert_pem, pair.key_pem)

    def __call__(self) -> ssl.SSLContext:
        return self._context


class CertFiles:
    """The certificate and key in `cert_dir`, re-read when either file changes. Raises
    ValueError at construction when they cannot be loaded (the message names the files)."""

    def __init__(self, cert_dir: str, cert_name: str = "tls.crt", key_name: str = "tls.key"):
        self.cert, self.key = Path(cert_dir, cert_name), Path(cert_dir, key_name)
        self._seen: tuple[Any, ...] = ()
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        try:
            self._reload()
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise ValueError(f"metrics certificate {self.cert} / key {self.key}: {exc}") from exc

    def __call__(self) -> ssl.SSLContext | None:
        with self._lock:
            try:
                self._reload()
            except (OSError, ValueError, ssl.SSLError) as exc:  # half-written: keep the last one
                log.warning("metrics certificate in %s not reloaded: %s", self.cert.parent, exc)
            return self._context

    def _reload(self) -> None:
        stats = (self.cert.stat(), self.key.stat())
        seen = tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)
        if seen != self._seen:
            self._context = server_context(self.cert.read_bytes(), self.key.read_bytes())
            self._seen = seen
