"""The HTTPS server the API server calls for admission: `POST /validate-kubeflow-org-v1-<kind>`
and `POST /mutate-kubeflow-org-v1-<kind>` (kubebuilder's paths, upstream's) for every enabled
kind, on a port of its own (default 9443); with TrainJob enabled also
`POST /validate-trainer-kubeflow-org-v1alpha1-<kind>` for TrainJob, TrainingRuntime and
ClusterTrainingRuntime (`V2_KINDS`, `v2_webhook_path`).

Its certificate can be replaced while it serves (`use_certificate`: renewal); each connection is
handshaken in its own thread with the certificate current at that moment. Requests are bounded:
a body of at most MAX_BODY_BYTES, read within READ_TIMEOUT. A body that is not an AdmissionReview
of the shape kube-apiserver sends answers 400 naming the field; an unexpected error answers 500, so
the API server applies the webhook's failurePolicy. The port is reachable by anyone who reaches
the pod, so what a peer can make it log is bounded: a hang-up is one debug line, and each peer
gets PEER_LOG_BURST lines, then one every PEER_LOG_EVERY seconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainop_core.api import trainjob as v2
from trainop_core.api.load import KindLookup
from trainop_core.kinds.base import Kind
from trainop_core.operator.jobsize import MAX_REPLICAS_PER_JOB
from trainop_core.operator.metrics import Registry
from trainop_core.operator.webhook.review import mutate, request_of, validate, validate_v2
from trainop_core.private_files import write_new
from trainop_core.runtimes.catalog import RuntimeCatalog

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 8 * 1024 * 1024  # an UPDATE carries the object twice; each is at most 3 MiB
READ_TIMEOUT = 10.0  # seconds a connection may take to send what it owes (and stay idle)
PEER_LOG_BURST = 5  # log lines a peer may cause at once ...
PEER_LOG_EVERY = 60.0  # ... then one per this many seconds
Review = Callable[[Mapping[str, Any], KindLookup], dict[str, Any]]
# Trainer v2's kinds with a validating webhook: (kind, plural).
V2_KINDS = (
    (v2.TRAINJOB, "trainjobs"),
    (v2.TRAINING_RUNTIME, "trainingruntimes"),
    (v2.CLUSTER_TRAINING_RUNTIME, "clustertrainingruntimes"),
)


def webhook_paths(kind: Kind) -> tuple[str, str]:
    """(validating, mutating) path of `kind`'s webhooks."""
    suffix = f"kubeflow-org-v1-{kind.kind.lower()}"
    return f"/validate-{suffix}", f"/mutate-{suffix}"


def v2_webhook_path(kind: str) -> str:
    """The validating path of Trainer v2 kind `kind` (TrainJob, TrainingRuntime, ...)."""
    return f"/validate-{v2.GROUP.replace('.', '-')}-{v2.VERSION}-{kind.lower()}"


class WebhookServer:
    """Serves the admission webhooks of `registry`'s kinds on `host:port` (0: any free port), and
    Trainer v2's when `trainjobs`."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: KindLookup,
        metrics: Registry | None = None,
        trainjobs: bool = False,
        runtimes: Callable[[], RuntimeCatalog] | None = None,
        max_replicas: int = MAX_REPLICAS_PER_JOB,
    ) -> None:
        self.registry = registry
        self.runtimes = runtimes
        self.max_replicas = max_replicas  # of one job (--max-replicas-per-job)
        self.routes: dict[str, tuple[str, Review]] = {}
        for kind in registry.kinds:
            validating, mutating = webhook_paths(kind)
            self.routes[validating] = (f"validate-{kind.kind.lower()}", self._validate)
            self.routes[mutating] = (f"mutate-{kind.kind.lower()}", mutate)
        for v2_kind, _ in V2_KINDS if trainjobs else ():
            route = (f"validate-{v2_kind.lower()}", self._validate_v2)
            self.routes[v2_webhook_path(v2_kind)] = route
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._started = False
        self._metrics = _Metrics(metrics) if metrics is not None else None
        self._log_limit = PeerLogLimit()
        self._server = _TLSServer((host, port), _handler(self), self)

    def _validate(self, request: Mapping[str, Any], registry: KindLookup) -> dict[str, Any]:
        """A v1 job's review, with this operator's bound on one job's replicas."""
        return validate(request, registry, self.max_replicas)

    def _validate_v2(self, request: Mapping[str, Any], registry: KindLookup) -> dict[str, Any]:
        """Trainer v2's review, with the runtimes the operator's caches hold (when it has any)."""
        runtimes = self.runtimes() if self.runtimes else None
        return validate_v2(request, registry, runtimes, self.max_replicas)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def serving(self) -> bool:
        """Listening, with a certificate (what /readyz waits for)."""
        with self._lock:
            return self._started and self._context is not None

    def use_certificate(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Serve this certificate (chain) and key from the next connection on."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory() as tmp:  # the ssl module loads keys from files only
            cert_file, key_file = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            write_new(cert_file, cert_pem)
            write_new(key_file, key_pem)
            context.load_cert_chain(str(cert_file), str(key_file))
        with self._lock:
            self._context = context

    def context(self) -> ssl.SSLContext | None:
        with self._lock:
            return self._context

    def start(self) -> None:
        threading.Thread(
            target=self._server.serve_forever, args=(0.1,), name="webhooks", daemon=True
        ).start()
        with self._lock:
            self._started = True

    def stop(self) -> None:
        with self._lock:
            started, self._started = self._started, False
        if started:  # shutdown() would wait forever for a loop that never ran
            self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, body: bytes, peer: str = "") -> tuple[int, dict[str, Any] | str]:
        """(HTTP status, AdmissionReview or error text) for one request from `peer`."""
        route = self.routes.get(path)
        if route is None:
            return 404, f"no webhook at {path}"
        started = time.monotonic()
        code, answer = self._review(route[1], body, peer)
        if self._metrics is not None:
            self._metrics.observe(route[0], code, time.monotonic() - started)
        return code, answer

    def _review(self, review: Review, body: bytes, peer: str) -> tuple[int, dict[str, Any] | str]:
        try:
            request = request_of(json.loads(body))
        except (ValueError, RecursionError) as exc:  # not JSON, or not an AdmissionReview
            return 400, f"bad request: {str(exc)[:200] or type(exc).__name__}"
        try:
            return 200, review(request, self.registry)
        except Exception:  # a bug: let the API server apply the failurePolicy
            self.log_for(peer, logging.ERROR, "webhook %s failed", review.__name__, exc_info=True)
            return 500, "internal error"

    def log_for(
        self, peer: str, level: int, message: str, *args: Any, exc_info: bool = False
    ) -> None:
        """Log for `peer` within its budget (PEER_LOG_BURST, then one per PEER_LOG_EVERY s)."""
        verdict = self._log_limit.allow(peer)
        if verdict == "no" or not log.isEnabledFor(level):
            return
        log.log(level, message, *args, exc_info=exc_info)
        if verdict == "last":
            log.log(level, "further lines caused by %s are dropped for a while", peer)


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], owner: Any
    ) -> None:
        self.owner = owner
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's own thread: the TLS handshake, then the HTTP exchange."""
        context = self.owner.context()
        if context is None:  # no certificate yet: nothing can be served
            return
        request.settimeout(READ_TIMEOUT)
        try:
            tls = context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            _close_quietly(tls)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed mid-exchange (a hang-up, a reset, a TLS EOF): one short
        debug line within the peer's budget, never socketserver's traceback on stderr."""
        exc = sys.exc_info()[1]
        peer = str(client_address[0]) if client_address else ""
        self.owner.log_for(peer, logging.DEBUG, "webhook connection from %s ended: %s", peer,
                           type(exc).__name__)  # fmt: skip


def _close_quietly(sock: Any) -> None:
    with contextlib.suppress(OSError):  # the peer is gone: nothing to tell it
        sock.close()


class PeerLogLimit:
    """A token bucket of log lines per peer address (PEER_LOG_BURST, refilled one per
    PEER_LOG_EVERY s), remembering at most MAX_PEERS peers (the least recent are forgotten)."""

    MAX_PEERS = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._peers: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._peers)

    def allow(self, peer: str) -> str:
        """ "yes", "last" (allowed, and the last before the peer is silenced) or "no"."""
        now = self._clock()
        with self._lock:
            tokens, at = self._peers.pop(peer, (float(PEER_LOG_BURST), now))
            tokens = min(float(PEER_LOG_BURST), tokens + (now - at) / PEER_LOG_EVERY)
            self._peers[peer] = (tokens - 1 if tokens >= 1 else tokens, now)
            while len(self._peers) > self.MAX_PEERS:
                self._peers.popitem(last=False)
        if tokens < 1:
            return "no"
        return "last" if tokens < 2 else "yes"


class _Metrics:
    """controller-runtime's webhook metrics (its names)."""

    def __init__(self, registry: Registry) -> None:
        self.requests = registry.counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code",
            ("webhook", "code"),
        )
        self.latency = registry.histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ("webhook",),
        )

    def observe(self, webhook: str, code: int, seconds: float) -> None:
        self.requests.inc(webhook=webhook, code=str(code))
        self.latency.observe(seconds, webhook=webhook)


def _handler(owner: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept alive: the API server reuses its connections

        def do_POST(self) -> None:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._send(411, "a Content-Length is required")
                return
            if int(length) > MAX_BODY_BYTES:
                self._send(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
                self.close_connection = True
                return
            try:
                body = self.rfile.read(int(length))
            except (TimeoutError, OSError):
                self.close_connection = True
                return
            peer = str(self.client_address[0])
            self._send(*owner.answer(self.path.split("?", 1)[0], body, peer))

        def _send(self, code: int, answer: dict[str, Any] | str) -> None:
            is_json = isinstance(answer, dict)
            data = (json.dumps(answer) if is_json else f"{answer}\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json" if is_json else "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler
