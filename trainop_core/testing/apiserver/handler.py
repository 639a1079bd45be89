"""HTTP request handler: discovery, CRUD verbs, subresources, and error ``Status`` bodies.

Streaming responses (watch, log follow) live in :mod:`.streams`. The handler never holds the
store lock while writing: the store returns committed (immutable) dicts.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import errors, resources, streams
from .codec import dumps
from .events import Obj
from .patch import json_patch, merge_patch, strategic_merge_patch
from .resources import ResourceType
from .routing import Target, parse_target, verb_for
from .scale import read_scale, write_scale
from .selectors import FieldSelector, LabelSelector
from .tables import as_table, wants_table

STANDIN_USER_AGENT = "trainop-kubelet-standin"  # trainop_core.testing.kubelet.USER_AGENT

if TYPE_CHECKING:
    from .server import ApiServer

log = logging.getLogger(__name__)
UNKNOWN_FORMAT = "the body of the request was in an unknown format - accepted media types include: "
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


class ApiHandler(BaseHTTPRequestHandler):
    """One connection; ``self.server.ctx`` is the owning :class:`ApiServer`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    @property
    def ctx(self) -> ApiServer:
        return self.server.ctx  # type: ignore[attr-defined, no-any-return]  # set by ApiServer

    @property
    def infrastructure(self) -> bool:
        """A request of the kubelet stand-in: served, but never faulted or counted (it is not
        the code under test, and must not consume a fault meant for the operator)."""
        return self.headers.get("User-Agent", "").startswith(STANDIN_USER_AGENT)

    def setup(self) -> None:
        super().setup()
        self.ctx.connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.ctx.connection_closed(self.connection)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug(fmt, *args)

    def do_GET(self) -> None:  # http.server naming
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ------------------------------------------------------------- plumbing
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return b""

    def send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(code, dumps(body), headers)

    def send_object(self, code: int, rt: ResourceType, obj: Obj) -> None:
        self.send_bytes(code, self.ctx.codec.encode(rt, obj))

    def send_bytes(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_status(self, err: errors.ApiError) -> None:
        headers = {}
        if err.retry_after is not None:
            headers["Retry-After"] = str(max(0, round(err.retry_after)))
        self.send_json(err.code, err.status(), headers)

    def _handle(self, method: str) -> None:
        try:
            raw = self._read_body()
            url = urlsplit(self.path)
            params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            parts = [unquote(p) for p in url.path.split("/") if p]
            if method == "GET" and self._discovery(parts):
                return
            self._serve(method, parse_target(parts), params, raw)
        except errors.ApiError as err:
            self.send_error_status(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # every bug must still answer with a Status
            log.exception("request failed: %s %s", method, self.path)
            self.send_error_status(errors.internal_error(f"{type(exc).__name__}: {exc}"))

    def _discovery(self, parts: list[str]) -> bool:
        with self.ctx.store.lock:
            body = resources.discovery(self.ctx.store.registry, parts, self.ctx.address)
        if body is None:
            return False
        if isinstance(body, bytes):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_json(200, body)
        return True

    # --------------------------------------------------------------- verbs
    def _serve(self, method: str, target: Target, params: dict[str, str], raw: bytes) -> None:
        store = self.ctx.store
        rt = store.resolve(target.group, target.version, target.plural)
        if rt is None or (target.namespace is not None and not rt.namespaced):
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        if target.subresource and target.subresource not in rt.subresources:
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        verb = verb_for(method, target, params)
        if params.get("dryRun"):
            raise errors.bad_request("dryRun is not supported by the fake API server")
        if rt.namespaced and target.namespace is None and verb not in ("list", "watch"):
            raise errors.ApiError(
                404, "NotFound", "the server could not find the requested resource"
            )
        namespace = target.namespace or ""
        cut_after = None
        rules = (
            []
            if self.infrastructure
            else self.ctx.faults.take(verb, target.label, namespace, target.name)
        )
        for rule in rules:
            if rule.delay:
                time.sleep(rule.delay)
            if rule.code is not None:
                raise errors.from_code(rule.code, rule.message, rule.retry_after)
            if rule.cut_after_events is not None:
                cut_after = rule.cut_after_events
        body = self._parse_body(raw, method, verb)
        getattr(self, f"_{verb}")(rt, target, namespace, params, body, cut_after)

    def _parse_body(self, raw: bytes, method: str, verb: str) -> Any:
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if "protobuf" in ctype or "cbor" in ctype:
            raise errors.unsupported_media_type(
                f"{UNKNOWN_FORMAT}application/json, application/yaml ({ctype} is not served)"
            )
        try:
            if ctype == "application/apply-patch+yaml" or ctype.endswith("yaml"):
                return _load_yaml(raw)
            return json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"invalid request body: {exc}") from exc

    def _selectors(
        self, rt: ResourceType, params: dict[str, str]
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = LabelSelector.parse(params.get("labelSelector"))
            fields = FieldSelector.parse(params.get("fieldSelector"))
        except ValueError as exc:
            raise errors.bad_request(f"unable to parse requirement: {exc}") from exc
        for path in fields.paths:
            if path not in rt.field_selectors:
                raise errors.bad_request(f'field label not supported: "{path}"')
        return labels, fields

    def _get(self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], *_: Any) -> None:
        obj = self.ctx.store.get(rt, ns, t.name)
        if t.subresource == "log":
            streams.serve_log(self, obj, params)
        elif t.subresource == "scale":
            self.send_json(200, read_scale(rt, obj))
        elif wants_table(self.headers.get("Accept", "")):
            self.send_json(200, as_table(rt, [obj], obj["metadata"]["resourceVersion"]))
        else:
            self.send_object(200, rt, obj)

    def _list(self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], *_: Any) -> None:
        labels, fields = self._selectors(rt, params)
        try:
            limit = int(params.get("limit") or 0)
        except ValueError as exc:
            raise errors.bad_request("limit must be an integer") from exc
        result = self.ctx.store.list(rt, t.namespace, labels, fields, limit, params.get("continue"))
        items = result.items
        if wants_table(self.headers.get("Accept", "")):
            self.send_json(200, as_table(rt, items, result.resource_version, result.continue_token))
            return
        metadata: dict[str, Any] = {"resourceVersion": result.resource_version}
        if result.continue_token:
            metadata["continue"] = result.continue_token
        if result.remaining is not None:
            metadata["remainingItemCount"] = result.remaining
        self.send_bytes(200, self.ctx.codec.list_body(rt, items, metadata))

    def _watch(
        self,
        rt: ResourceType,
        t: Target,
        ns: str,
        params: dict[str, str],
        body: Any,
        cut_after: int | None,
    ) -> None:
        labels, fields = self._selectors(rt, params)
        streams.serve_watch(self, rt, t, labels, fields, params, cut_after)

    def _create(
        self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], body: Any, *_: Any
    ) -> None:
        if t.subresource:
            raise errors.method_not_allowed()
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        self.send_object(201, rt, self.ctx.store.create(rt, ns, body))

    def _update(
        self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], body: Any, *_: Any
    ) -> None:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        store = self.ctx.store
        if t.subresource == "scale":
            obj = store.mutate(rt, ns, t.name, lambda cur: write_scale(rt, cur, body))
            self.send_json(200, read_scale(rt, obj))
            return
        self.send_object(200, rt, store.update(rt, ns, t.name, body, t.subresource))

    def _patch(
        self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], body: Any, *_: Any
    ) -> None:
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        kind = PATCH_TYPES.get(ctype)
        if kind is None:
            raise errors.unsupported_media_type(UNKNOWN_FORMAT + ", ".join(PATCH_TYPES))
        if kind == "strategic" and rt.custom:
            raise errors.unsupported_media_type(
                "strategic merge patch is not supported for custom resources"
            )
        store = self.ctx.store
        if kind == "apply" and t.subresource is None and store.find(rt, ns, t.name) is None:
            created = {**body, "metadata": {**(body or {}).get("metadata", {}), "name": t.name}}
            self.send_object(201, rt, store.create(rt, ns, created))
            return

        def change(current: Obj) -> Obj:
            if t.subresource == "scale":
                return write_scale(rt, current, _apply_patch(kind, read_scale(rt, current), body))
            return _apply_patch(kind, current, body)

        obj = store.mutate(
            rt, ns, t.name, change, None if t.subresource == "scale" else t.subresource
        )
        if t.subresource == "scale":
            self.send_json(200, read_scale(rt, obj))
        else:
            self.send_object(200, rt, obj)

    def _delete(
        self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], body: Any, *_: Any
    ) -> None:
        if t.subresource:
            raise errors.method_not_allowed()
        options = body if isinstance(body, dict) else {}
        policy = params.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is True:
            policy = "Orphan"
        obj, removed = self.ctx.store.delete(rt, ns, t.name, policy, options.get("preconditions"))
        if removed and not rt.return_deleted_object:
            meta = obj["metadata"]
            details = {
                "name": meta["name"],
                "group": rt.group,
                "kind": rt.plural,
                "uid": meta["uid"],
            }
            self.send_json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                },
            )
            return
        self.send_object(200 if removed else 202, rt, obj)

    def _deletecollection(
        self, rt: ResourceType, t: Target, ns: str, params: dict[str, str], body: Any, *_: Any
    ) -> None:
        labels, fields = self._selectors(rt, params)
        options = body if isinstance(body, dict) else {}
        policy = params.get("propagationPolicy") or options.get("propagationPolicy")
        store, deleted = self.ctx.store, []
        for obj in store.list(rt, t.namespace, labels, fields).items:
            meta = obj["metadata"]
            try:
                deleted.append(store.delete(rt, meta.get("namespace", ""), meta["name"], policy)[0])
            except errors.ApiError as err:
                if err.code != 404:
                    raise
        self.send_json(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(store.resource_version)},
                "items": [dict(o, apiVersion=rt.api_version) for o in deleted],
            },
        )


def _apply_patch(kind: str, current: Obj, body: Any) -> Obj:
    if kind == "json":
        return json_patch(current, body)  # type: ignore[no-any-return]  # patch keeps a dict
    if not isinstance(body, dict):
        raise errors.bad_request("the patch must be a JSON object")
    if kind == "strategic":
        return strategic_merge_patch(current, body)  # type: ignore[no-any-return]
    return merge_patch(current, body)  # type: ignore[no-any-return]


def _load_yaml(raw: bytes) -> Any:
    try:
        yaml = importlib.import_module("yaml")  # optional: only apply-patch bodies need it
    except ImportError:
        return json.loads(raw)
    return yaml.safe_load(raw)
