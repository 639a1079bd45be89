"""Kubernetes ``Status`` errors raised by the fake API server.

Every failure the server reports is an :class:`ApiError`; the HTTP layer turns it into a
``metav1.Status`` body with the same ``code`` and ``reason`` the real kube-apiserver uses.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request failure that maps one-to-one onto a Kubernetes ``Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """Return the ``Status`` body the real API server would send."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(resource: str, name: str, group: str = "") -> dict[str, Any]:
    return (
        {"name": name, "group": group, "kind": resource}
        if group
        else {"name": name, "kind": resource}
    )


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    msg = f'{_qualified(resource, group)} "{name}" not found'
    return ApiError(404, "NotFound", msg, details=_details(resource, name, group))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    msg = f'{_qualified(resource, group)} "{name}" already exists'
    return ApiError(409, "AlreadyExists", msg, details=_details(resource, name, group))


def conflict(resource: str, name: str, why: str, group: str = "") -> ApiError:
    msg = f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, details=_details(resource, name, group))


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(kind: str, name: str, causes: list[tuple[str, str]], group: str = "") -> ApiError:
    """422 Invalid; ``causes`` are ``(field path, message)`` pairs."""
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    details = {
        "name": name,
        "group": group,
        "kind": kind,
        "causes": [
            {"reason": "FieldValueInvalid", "message": msg, "field": field} for field, msg in causes
        ],
    }
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(message: str = "the server does not allow this method") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def expired(message: str) -> ApiError:
    """410 Gone with reason ``Expired``: the resourceVersion left the history window."""
    return ApiError(410, "Expired", message)


def too_many_requests(retry_after: float = 1.0) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
        details={"retryAfterSeconds": int(retry_after)},
        retry_after=retry_after,
    )


def internal_error(message: str = "an error on the server has prevented the request") -> ApiError:
    return ApiError(500, "InternalError", message)


def from_code(code: int, message: str | None = None, retry_after: float | None = None) -> ApiError:
    """An error for an injected fault with the usual reason for ``code``."""
    reasons = {
        400: "BadRequest",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Gone",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }
    if code == 429:
        err = too_many_requests(retry_after if retry_after is not None else 1.0)
        if message:
            err.message = message
        return err
    reason = reasons.get(code, "InternalError")
    return ApiError(code, reason, message or f"injected fault ({reason})", retry_after=retry_after)
