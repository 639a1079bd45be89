"""Small builders and a polling helper for tests that use the fake API server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
    """Poll ``check`` until it returns something truthy; raise AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)


def make_pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    restart_policy: str = "Never",
    containers: tuple[str, ...] = ("main",),
    owner: dict[str, Any] | None = None,
    image: str = "busybox",
) -> dict[str, Any]:
    """A minimal valid pod manifest (one ``busybox`` container per name in ``containers``)."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": c, "image": image} for c in containers],
        },
    }


def owner_ref(
    owner: dict[str, Any], *, controller: bool = True, block: bool = True
) -> dict[str, Any]:
    """An ownerReference pointing at the stored object ``owner`` (a dict with a uid)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": block,
    }
