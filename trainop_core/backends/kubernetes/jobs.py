"""Jobs on the API server as raw dicts: create, get, list, delete and watch (kubeflow.org/v1 kinds,
or, with another group and version, Trainer v2's TrainJobs).

Only this module and `logs` talk HTTP; errors leave here already translated (see `errors`).
Objects stay plain JSON dicts (no generated models): parsing them is the caller's business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from trainop_core.api.job import GROUP, VERSION
from trainop_core.backends.kubernetes.errors import ApiError, translate
from trainop_core.errors import NotFoundError
from trainop_core.kinds.base import Kind

T = TypeVar("T")
PAGE_SIZE = 500
CONNECT_TIMEOUT = 10.0
# Extra seconds a client waits past the server's own watch timeout before calling it a dead TCP.
READ_SLACK = 15.0


class WatchExpired(Exception):
    """The resourceVersion a watch started from is too old (HTTP 410): re-read and start over."""


class JobStore:
    """CRUD and watch for every job kind of one API group and version (default kubeflow.org/v1)
    through one `CustomObjectsApi`."""

    def __init__(self, api_client: Any, group: str = GROUP, version: str = VERSION) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self._api_version = (group, version)

    def create(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST the job; AlreadyExistsError, InvalidJobError (422) or ApiError otherwise."""
        name = body.get("metadata", {}).get("name", "")
        return self._call(
            lambda: self._api.create_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, body
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        """GET one job; NotFoundError when it does not exist."""
        return self._call(
            lambda: self._api.get_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, name
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )

    def list(self, kind: Kind, namespace: str | None) -> list[dict[str, Any]]:
        """Every job of `kind` in `namespace` (None: all namespaces), fetched page by page."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(partial(self._list_page, kind, namespace, token), what=kind.plural)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def snapshot(self, kind: Kind, namespace: str, name: str) -> tuple[dict[str, Any], str]:
        """The job and the collection's resourceVersion to watch from (a LIST narrowed to the
        name: an object's own resourceVersion may predate the server's compaction, and a watch
        from it would fail with 410 at once). NotFoundError if there is no such job."""
        page = self._call(
            lambda: self._api.list_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, field_selector=f"metadata.name={name}"
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )
        items = page.get("items") or []
        if not items:
            raise NotFoundError(f"{kind.kind} {namespace}/{name} not found")
        return dict(items[0]), str((page.get("metadata") or {}).get("resourceVersion", ""))

    def delete(self, kind: Kind, namespace: str, name: str, propagation: str) -> None:
        """DELETE with `propagation` ("Foreground" or "Background"); NotFoundError if missing."""
        self._call(
            lambda: self._api.delete_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, name, propagation_policy=propagation
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )

    def patch(self, kind: Kind, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the job (its spec or metadata); NotFoundError if missing."""
        return self._call(
            lambda: self._api.patch_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, name, patch
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )

    def patch_status(
        self, kind: Kind, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        """JSON merge patch through the status subresource. Put `metadata.resourceVersion` in
        `patch` to make it conditional (ConflictError when the job changed meanwhile)."""
        return self._call(
            lambda: self._api.patch_namespaced_custom_object_status(
                *self._api_version, namespace, kind.plural, name, patch
            ),
            what=f"{kind.kind} {namespace}/{name}",
        )

    def watch(
        self, kind: Kind, namespace: str, name: str, resource_version: str, seconds: float
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) events for one job after `resource_version`, for at most about
        `seconds` (the server ends the stream). Raises WatchExpired on 410."""
        window = max(1, int(seconds))
        response = self._call(
            lambda: self._api.list_namespaced_custom_object(
                *self._api_version,
                namespace,
                kind.plural,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=window,
                watch=True,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, window + READ_SLACK),
            ),
            what=f"watch {kind.kind} {namespace}/{name}",
        )
        from urllib3.exceptions import HTTPError

        try:
            yield from _events(response)
        except HTTPError as exc:  # the stream broke (server cut it, connection reset, read timeout)
            raise ApiError(f"watch {kind.kind} {namespace}/{name}: {exc}") from exc
        finally:
            response.close()
            response.release_conn()

    def _list_page(self, kind: Kind, namespace: str | None, token: str | None) -> dict[str, Any]:
        options: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            options["_continue"] = token
        if namespace is None:
            return dict(
                self._api.list_cluster_custom_object(*self._api_version, kind.plural, **options)
            )
        return dict(
            self._api.list_namespaced_custom_object(
                *self._api_version, namespace, kind.plural, **options
            )
        )

    @staticmethod
    def _call(request: Callable[[], T], *, what: str) -> T:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return request()
        except ApiException as exc:
            if exc.status == 410:
                raise WatchExpired(what) from exc
            raise translate(exc, what=what, job=what) from exc
        except HTTPError as exc:  # unreachable server, reset or timed-out connection
            raise ApiError(f"{what}: {exc}") from exc


def _events(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    from kubernetes.watch.watch import iter_resp_lines

    for line in iter_resp_lines(response):
        event = json.loads(line)
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(str(obj.get("message", "")))
            raise ApiError(f"watch: {obj.get('message', obj)}", int(obj.get("code") or 0))
        yield str(event.get("type")), obj
