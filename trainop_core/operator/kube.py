"""Raw JSON access to the Kubernetes API through the official client's `ApiClient.call_api`.

Objects stay plain dicts (`_preload_content=False` + `json.loads`): the client's model
deserialisation costs ~0.5 ms per pod, about 70x `json.loads`. Every request first takes a token
from the client-side bucket (`--kube-api-qps`/`--kube-api-burst`; the Python client has none) and is
counted in `rest_client_requests_total{verb,code}`. A 429 (or 5xx) with Retry-After, which the API
server's priority and fairness sends an overloaded client, is waited out and sent again, as
client-go does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from trainop_core.operator.metrics import OperatorMetrics
from trainop_core.operator.ratelimit import TokenBucket

Obj = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_TIMEOUT = (10.0, 30.0)  # (connect, read) seconds for ordinary requests
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
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
VOLCANO_POD_GROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")


class ApiError(Exception):
    """A non-2xx answer (status 0: no answer at all). `reason` is the Status reason."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
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
    def from_exception(cls, exc: ApiException) -> ApiError:
        body = exc.body.decode() if isinstance(exc.body, bytes) else (exc.body or "")
        try:
            status: Obj = json.loads(body)
        except ValueError:
            status = {}
        if not isinstance(status, dict):
            status = {}
        return cls(
            exc.status or 0,
            str(status.get("reason", exc.reason or "")),
            str(status.get("message", body)),
        )


def load_api_client(kubeconfig: str = "", pool_size: int = 16) -> k8s_client.ApiClient:
    """`--kubeconfig`, else $KUBECONFIG, else in-cluster, else ~/.kube/config."""
    cfg = k8s_client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if path:
        k8s_config.load_kube_config(config_file=path, client_configuration=cfg)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(cfg)


class KubeClient:
    """Thread-safe raw JSON client; one per process, shared by every informer and controller."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        qps: float = 20.0,
        burst: int = 30,
        metrics: OperatorMetrics | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.api = api_client
        self.bucket = TokenBucket(qps, burst)
        self.metrics = metrics
        self.stop = stop
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
        """One call; the decoded JSON answer. Raises ApiError (status 0 on transport failure)."""
        resp = self._call(method, path, query, body, content_type, timeout)
        try:
            data = resp.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # the body broke off
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        finally:
            resp.release_conn()
        decoded: Obj = json.loads(data) if data else {}
        return decoded

    def stream_lines(
        self, path: str, query: dict[str, Any], timeout: tuple[float, float]
    ) -> tuple[urllib3.BaseHTTPResponse, Iterator[bytes]]:
        """Open a streaming GET (a watch): the response (close it to stop) and its lines."""
        resp = self._call("GET", path, query, None, JSON, timeout)
        return resp, _iter_lines(resp)

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Obj | None,
        content_type: str,
        timeout: tuple[float, float],
    ) -> urllib3.BaseHTTPResponse:
        """One request; a 429 or 5xx answer with Retry-After is waited out and sent again, up to
        MAX_RETRIES times, as client-go does (the server did not act on it)."""
        for attempt in range(MAX_RETRIES + 1):
            try:
                return self._call_once(method, path, query, body, content_type, timeout)
            except _RetryAfter as wait:
                if attempt == MAX_RETRIES or (self.stop is not None and self.stop.is_set()):
                    raise wait.error from None
                if self.stop is not None:
                    self.stop.wait(wait.seconds)
                else:
                    time.sleep(wait.seconds)
        raise AssertionError("unreachable")

    def _call_once(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Obj | None,
        content_type: str,
        timeout: tuple[float, float],
    ) -> urllib3.BaseHTTPResponse:
        if self._fenced:
            raise ApiError(0, "Fenced", "this process lost its lease")
        self.bucket.wait(self.stop)
        params = [(k, _query_value(v)) for k, v in (query or {}).items() if v not in (None, "")]
        try:
            resp: urllib3.BaseHTTPResponse = self.api.call_api(
                path,
                method,
                query_params=params,
                body=body,
                header_params={"Content-Type": content_type, "Accept": JSON},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            error = ApiError.from_exception(exc)
            self._count(method, str(error.status) if error.status else "<error>")
            seconds = _retry_after(exc)
            if seconds is not None:
                raise _RetryAfter(error, seconds) from exc
            raise error from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._count(method, "<error>")
            raise ApiError(0, type(exc).__name__, str(exc)) from exc
        self._count(method, str(resp.status))
        return resp

    def _count(self, verb: str, code: str) -> None:
        if self.metrics:
            self.metrics.rest_requests.inc(verb=verb, code=code)


class _RetryAfter(Exception):
    """The server asked to be asked again in `seconds` (429, or a 5xx with Retry-After)."""

    def __init__(self, error: ApiError, seconds: float) -> None:
        super().__init__(str(error))
        self.error, self.seconds = error, seconds


def _retry_after(exc: ApiException) -> float | None:
    """client-go's rule: a 429 or 5xx answer that carries Retry-After (whole seconds)."""
    status = exc.status or 0
    header = (exc.headers or {}).get("Retry-After") if status == 429 or status >= 500 else None
    try:
        seconds = float(header) if header is not None else None
    except ValueError:
        return None
    return None if seconds is None else min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _iter_lines(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """Newline-delimited frames of a chunked watch response, as they arrive."""
    buffer = b""
    chunks = resp.read_chunked() if getattr(resp, "chunked", False) else resp.stream(None)
    for chunk in chunks:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
