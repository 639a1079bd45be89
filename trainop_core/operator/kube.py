"""Raw JSON access to the Kubernetes API over the operator's own connection (`connection.py`).

Objects stay plain dicts (`json.loads`): the official client's model deserialisation costs ~0.5 ms
per pod, about 70x `json.loads`, and importing it ~55 MiB. Every request first takes a token from
the client-side bucket (`--kube-api-qps`/`--kube-api-burst`) and is counted in
`rest_client_requests_total{verb,code}`. A 429 (or 5xx) with Retry-After, which the API server's
priority and fairness sends an overloaded client, is waited out and sent again, as client-go does
(the server did not act on it). A write whose answer was lost is not sent again: ApiError says
`answer_lost`, and the caller finds out whether it happened.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainop_core.operator.connection import Connection, Stream, TransportError, target
from trainop_core.operator.kubeconfig import load_connection
from trainop_core.operator.liveness import CONNECT_TIMEOUT, REQUEST_READ_TIMEOUT
from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.ratelimit import TokenBucket

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (CONNECT_TIMEOUT, REQUEST_READ_TIMEOUT)  # ordinary requests (liveness.py)
MAX_RETRIES = 10  # client-go's: a request refused with Retry-After is sent again up to 10 times
MAX_RETRY_AFTER = 10.0  # seconds: a larger Retry-After is waited out 10 s at a time


@dataclass(frozen=True)
class Resource:
    """One REST resource: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
# A subresource, read as PODS.path(ns, pod, "log"): training progress (operator/progress.py)
# is read from the primary replica's output. Named here for the RBAC it needs.
PODS_LOG = Resource("", "v1", "pods/log", "PodLogOptions")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
VOLCANO_POD_GROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
# What kinds plan besides pods and services (Kind.objects: MPIJob's ConfigMap and launcher RBAC).
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
# Never called: a Role may only grant what its creator holds, and MPI launchers' Roles grant it.
PODS_EXEC = Resource("", "v1", "pods/exec", "PodExecOptions")
OBJECT_RESOURCES = {r.kind: r for r in (CONFIG_MAPS, SERVICE_ACCOUNTS, ROLES, ROLE_BINDINGS)}


class ApiError(Exception):
    """A non-2xx answer (status 0: no answer at all). `reason` is the Status reason."""

    def __init__(
        self, status: int, reason: str = "", message: str = "", *, answer_lost: bool = False
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        # The request went out and no (whole) answer came back: the server may have acted on
        # it. A write is never sent again by the connection; its caller looks for what it wrote.
        self.answer_lost = answer_lost
        super().__init__(f"{status} {reason}: {message}".strip())

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @classmethod
    def from_answer(cls, status: int, raw: bytes) -> ApiError:
        """The error a non-2xx answer stands for (its Status reason and message, if any)."""
        try:
            body: Any = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(status, "", raw.decode(errors="replace")[:500])
        return cls(status, str(body.get("reason", "")), str(body.get("message", "")))


def load_api_client(kubeconfig: str = "") -> Connection:
    """`--kubeconfig`, else $KUBECONFIG, else in-cluster, else ~/.kube/config."""
    return load_connection(kubeconfig)


def as_connection(api_client: Connection | Any) -> Connection:
    """A Connection as it is, or a ``kubernetes.client.ApiClient``'s settings adopted as one."""
    if isinstance(api_client, Connection):
        return api_client
    return Connection.from_api_client(api_client)


class KubeClient:
    """Thread-safe raw JSON client; one per process, shared by every informer and controller."""

    def __init__(
        self,
        api_client: Connection | Any,
        qps: float = 20.0,
        burst: int = 30,
        metrics: OperatorMetrics | None = None,
        stop: threading.Event | None = None,
        *,
        bucket: TokenBucket | None = None,
        retries: int = MAX_RETRIES,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        """`api_client`: a Connection, or a ``kubernetes.client.ApiClient`` to adopt. `bucket`:
        another client's, to share its limit (default: one of `qps` and `burst`). `retries`: how
        often a Retry-After answer is waited out and sent again. `may_write`: asked before
        every write (anything but GET); False refuses it (the lease is not surely held)."""
        self.api = as_connection(api_client)
        self.bucket = bucket or TokenBucket(qps, burst)
        self.metrics = metrics
        self.stop = stop
        self.retries = retries
        self.may_write = may_write
        self._fenced = False

    def fence(self) -> None:
        """Refuse every further request (leadership lost: not one more write may go out)."""
        self._fenced = True

    # --- verbs -------------------------------------------------------------------------------
    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        return self.request("GET", res.path(namespace, name))

    def list(self, res: Resource, namespace: str = "", **query: Any) -> Obj:
        return self.request("GET", res.path(namespace), query=query)

    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        return self.request("POST", res.path(namespace), body=body)

    def replace(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        return self.request("PUT", res.path(namespace, name), body=body)

    def replace_status(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        return self.request("PUT", res.path(namespace, name, "status"), body=body)

    def patch(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        return self.request("PATCH", res.path(namespace, name), body=body, content_type=MERGE_PATCH)

    def delete(
        self, res: Resource, namespace: str, name: str, propagation: str = "", uid: str = ""
    ) -> Obj:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        return self.request("DELETE", res.path(namespace, name), body=body)

    # --- transport ---------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Obj | None = None,
        content_type: str = JSON,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> Obj:
        """One call; the decoded JSON answer. Raises ApiError (status 0 on transport failure).

        A 429 or 5xx answer with Retry-After is waited out and sent again, up to MAX_RETRIES
        times, as client-go does (the server did not act on it)."""
        data = None if body is None else json.dumps(body).encode()
        raw = self._exchange(method, target(path, query), data, content_type, JSON, timeout)
        decoded: Obj = json.loads(raw) if raw else {}
        return decoded

    def get_text(
        self, path: str, query: dict[str, Any], timeout: tuple[float, float] = DEFAULT_TIMEOUT
    ) -> str:
        """A GET whose answer is text, not JSON (a pod's log); as `request` otherwise."""
        raw = self._exchange("GET", target(path, query), None, JSON, "*/*", timeout)
        return raw.decode(errors="replace")

    def _exchange(
        self,
        method: str,
        url: str,
        data: bytes | None,
        content_type: str,
        accept: str,
        timeout: tuple[float, float],
    ) -> bytes:
        headers = {"Accept": accept, "Content-Type": content_type}
        for attempt in range(self.retries + 1):
            self._admit(method)
            try:
                status, answer_headers, raw = self.api.request(method, url, data, headers, timeout)
            except TransportError as exc:  # no answer, or its body broke off
                self._count(method, "<error>")
                raise ApiError(0, "TransportError", str(exc), answer_lost=exc.sent) from exc
            self._count(method, str(status))
            if status < 300:
                return raw
            error = ApiError.from_answer(status, raw)
            seconds = _retry_after(status, answer_headers.get("Retry-After"))
            if seconds is None or attempt == self.retries or (self.stop and self.stop.is_set()):
                raise error
            if self.stop is not None:
                self.stop.wait(seconds)
            else:
                time.sleep(seconds)
        raise AssertionError("unreachable")

    def stream_lines(
        self, path: str, query: dict[str, Any], timeout: tuple[float, float]
    ) -> tuple[Stream, Iterator[bytes]]:
        """Open a streaming GET (a watch): the stream (close it to stop) and its lines."""
        self._admit()
        try:
            stream = self.api.stream(target(path, query), {"Accept": JSON}, timeout)
        except TransportError as exc:
            self._count("GET", "<error>")
            raise ApiError(0, "TransportError", str(exc)) from exc
        self._count("GET", str(stream.status))
        if stream.status >= 300:
            raise ApiError.from_answer(stream.status, stream.read_all())
        return stream, stream.lines()

    def _admit(self, method: str = "GET") -> None:
        if self._fenced:
            raise ApiError(0, "Fenced", "this process lost its lease")
        self.bucket.wait(self.stop)
        # After the token wait, which can be long: the lease may have run out meanwhile.
        if method != "GET" and self.may_write is not None and not self.may_write():
            raise ApiError(0, "Fenced", "this process does not hold its lease: no write goes out")

    def _count(self, verb: str, code: str) -> None:
        if self.metrics:
            self.metrics.rest_requests.inc(verb=verb, code=code)


def _retry_after(status: int, header: str | None) -> float | None:
    """client-go's rule: a 429 or 5xx answer that carries Retry-After (whole seconds)."""
    if header is None or not (status == 429 or status >= 500):
        return None
    try:
        seconds = float(header)
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
