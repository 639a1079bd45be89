"""Kubernetes API errors translated into trainop's errors (the local backend's semantics)."""

from __future__ import annotations

import json
from typing import Any

from trainop_core.errors import (
    AlreadyExistsError,
    InvalidJobError,
    NotFoundError,
    Problem,
    TrainopError,
)


class ApiError(TrainopError):
    """Any other failed API call; `status` is the HTTP code (0 when the server was unreachable)."""

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


def status_body(exc: Any) -> dict[str, Any]:
    """The `Status` object a failed call returned, or {} when the body is not one."""
    try:
        body = json.loads(exc.body or b"{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def translate(exc: Any, *, what: str, job: str = "") -> TrainopError:
    """Map a kubernetes ApiException for `what` (e.g. "PyTorchJob ns/name") to a trainop error."""
    status = int(getattr(exc, "status", 0) or 0)
    body = status_body(exc)
    message = str(body.get("message") or getattr(exc, "reason", "") or exc)
    if status == 404:
        return NotFoundError(f"{what} not found")
    if status == 409 and body.get("reason") == "AlreadyExists":
        return AlreadyExistsError(f"{what} already exists")
    if status == 422:
        return InvalidJobError(_problems(body, message), source="kubernetes", job=job)
    return ApiError(f"{what}: HTTP {status}: {message}", status)


def _problems(body: dict[str, Any], message: str) -> list[Problem]:
    causes = (body.get("details") or {}).get("causes") or []
    problems = [Problem(str(c.get("field", "")), str(c.get("message", ""))) for c in causes]
    return problems or [Problem("", message)]
