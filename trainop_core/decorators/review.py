"""The decorator-server protocol: a `PodDecorationReview`, modelled on admission.k8s.io/v1's
AdmissionReview.

Request (POST, `Content-Type: application/json`)::

    {"apiVersion": "decoration.trainop.kubeflow.org/v1", "kind": "PodDecorationReview",
     "request": {"uid": "<unique per call>",
                 "job": {<the job, defaulted, as stored>},
                 "replicaType": "Worker", "replicaIndex": 0, "replicas": 4,
                 "object": {<the Pod of that replica, as it would be created>}}}

Response (HTTP 200)::

    {"apiVersion": "decoration.trainop.kubeflow.org/v1", "kind": "PodDecorationReview",
     "response": {"uid": "<the request's>", "allowed": true,
                  "patchType": "JSONPatch", "patch": "<base64 of a JSON Patch (RFC 6902)>",
                  "status": {"message": "why (shown when not allowed)"}}}

A server is asked once per replica type and job generation: the pod it sees is that of the
lowest index being created, and its answer is applied to every pod of the type (so a patch
should address paths every replica of the type has; one that does not apply to some of them is
a failure of the server). `allowed: false` refuses the job (see `decoration` for what follows).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

REVIEW_API_VERSION = "decoration.trainop.kubeflow.org/v1"
REVIEW_KIND = "PodDecorationReview"
MAX_PATCH_OPERATIONS = 1000
PATCH_OPERATIONS = ("add", "remove", "replace", "move", "copy", "test")


class DecorationError(Exception):
    """A decorator server's answer could not be used; `reason` names the kind of failure (the
    metrics' label): unreachable, timeout, status, too_large, malformed, refused,
    forbidden_patch, patch_failed."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class Verdict:
    """A usable answer: allowed with a (possibly empty) patch, or a refusal with its message."""

    allowed: bool
    patch: tuple[dict[str, Any], ...] = ()
    message: str = ""
    size: int = 0  # bytes of the answer (what a cache of verdicts holds)


def review_request(
    uid: str, job: dict[str, Any], rtype: str, index: int, replicas: int, pod: dict[str, Any]
) -> dict[str, Any]:
    """The request body for one replica type of one job."""
    return {
        "apiVersion": REVIEW_API_VERSION,
        "kind": REVIEW_KIND,
        "request": {
            "uid": uid,
            "job": job,
            "replicaType": rtype,
            "replicaIndex": index,
            "replicas": replicas,
            "object": pod,
        },
    }


def read_verdict(raw: bytes, uid: str) -> Verdict:
    """The verdict in a response body; DecorationError("malformed") says what is wrong with it."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _malformed(f"the answer is not JSON ({_short(exc)})") from None
    if not isinstance(body, dict):
        raise _malformed("the answer is not a JSON object")
    if body.get("apiVersion") != REVIEW_API_VERSION or body.get("kind") != REVIEW_KIND:
        raise _malformed(f"the answer is not a {REVIEW_API_VERSION} {REVIEW_KIND}")
    response = body.get("response")
    if not isinstance(response, dict):
        raise _malformed("the answer has no response object")
    if response.get("uid") != uid:
        raise _malformed("response.uid is not the request's uid")
    allowed = response.get("allowed")
    if not isinstance(allowed, bool):
        raise _malformed("response.allowed must be true or false")
    if not allowed:
        return Verdict(False, message=_status_message(response), size=len(raw))
    return Verdict(True, _patch(response), size=len(raw))


def _status_message(response: dict[str, Any]) -> str:
    status = response.get("status")
    message = status.get("message") if isinstance(status, dict) else None
    return str(message)[:1024] if message else "no reason given"


def _patch(response: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    encoded = response.get("patch")
    if encoded is None:
        return ()
    if response.get("patchType") != "JSONPatch":
        raise _malformed('response.patchType must be "JSONPatch" when there is a patch')
    if not isinstance(encoded, str):
        raise _malformed("response.patch must be a base64 string")
    try:
        ops = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise _malformed(f"response.patch is not base64 of JSON ({_short(exc)})") from None
    if not isinstance(ops, list) or len(ops) > MAX_PATCH_OPERATIONS:
        raise _malformed(f"response.patch must be a list of at most {MAX_PATCH_OPERATIONS} ops")
    for i, op in enumerate(ops):
        if not (
            isinstance(op, dict)
            and op.get("op") in PATCH_OPERATIONS
            and isinstance(op.get("path"), str)
        ):
            raise _malformed(f"response.patch[{i}] is not a JSON Patch operation")
    return tuple(ops)


def _malformed(message: str) -> DecorationError:
    return DecorationError("malformed", message)


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__
