"""Opaque ``continue`` tokens for paged LISTs.

A token records the list's resourceVersion and the last ``(namespace, name)`` key returned;
the next page starts after that key. A token older than the retained history is 410 Expired,
as an etcd-compacted continue token is on the real server.
"""

from __future__ import annotations

import base64
import json

from . import errors


def encode_continue(rv: int, last: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "start": list(last)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str, compacted_rv: int) -> tuple[int, tuple[str, str]]:
    """``(list resourceVersion, last key)``; 400 if malformed, 410 if too old."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, start = int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise errors.bad_request(f"invalid continue token: {exc}") from exc
    if rv < compacted_rv:
        raise errors.expired(
            "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter."
        )
    return rv, start
